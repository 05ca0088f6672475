"""MQTT: the connection, the publisher, the listener."""
