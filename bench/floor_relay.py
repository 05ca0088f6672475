"""The floor: the least any correct host could do per card (bench/latency.py compares).

Reads a frame, appends it to a file with fsync, ACKs, publishes a small JSON event with
QoS 1 (waiting for PUBACK). No rules, no state, no retransmission of its own.
Usage: python bench/floor_relay.py PORT MQTT_PORT LOGFILE [TOPIC]
"""

import json
import os
import sys

import paho.mqtt.client as mqtt
import serial

from firmware_protocol import Ack, Card, StreamDecoder, build_frame, decode_message
from firmware_protocol.framing import RawFrame

port, mqtt_port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
topic = sys.argv[4] if len(sys.argv) > 4 else "floor/events"
line = serial.serial_for_url(port, baudrate=115200, timeout=1)
client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
client.connect("127.0.0.1", mqtt_port)
client.loop_start()
log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
decoder = StreamDecoder()
print("ready", flush=True)
while True:
    for frame in decoder.feed(line.read(line.in_waiting or 1)):
        if not isinstance(frame, RawFrame) or frame.type_code in (0x7E, 0x7F):
            continue
        os.write(log, frame.payload)
        os.fsync(log)
        line.write(build_frame(Ack.TYPE, 0, frame.seq.to_bytes(2, "little")))
        message = decode_message(frame.type_code, frame.payload)
        if isinstance(message, Card):
            info = client.publish(topic, json.dumps(
                {"seq": frame.seq, "card_index": message.card_index}), qos=1)
            info.wait_for_publish()
