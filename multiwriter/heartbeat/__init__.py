"""Writer heartbeats: a background thread per client, and the judge that tells dead writers
from live ones by watching their beats change."""
from .client import HeartbeatClient, expiry_bound_s, heartbeat_age_s, is_lapsed
from .judge import HeartbeatJudge, read_beat

__all__ = ["HeartbeatClient", "HeartbeatJudge", "expiry_bound_s", "heartbeat_age_s", "is_lapsed", "read_beat"]
