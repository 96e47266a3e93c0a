"""Table lock providers: ZooKeeper (across machines), a lock file (one machine), in-process."""
from .base import HolderInfo, LockProvider, TableLock
from .filesystem import FileSystemLock
from .in_process import InProcessLock
from .zookeeper import ZooKeeperLock

__all__ = ["FileSystemLock", "HolderInfo", "InProcessLock", "LockProvider", "TableLock", "ZooKeeperLock"]
