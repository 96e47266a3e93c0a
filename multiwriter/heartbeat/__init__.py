"""Writer heartbeats: a background thread per client, and the expiry rule everyone shares."""
from .client import HeartbeatClient, expiry_bound_s, heartbeat_age_s, is_lapsed

__all__ = ["HeartbeatClient", "expiry_bound_s", "heartbeat_age_s", "is_lapsed"]
