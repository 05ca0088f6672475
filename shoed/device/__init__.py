"""The shoe's side: transports, frames to engine inputs, the link session."""
