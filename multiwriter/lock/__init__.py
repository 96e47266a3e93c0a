"""Table lock providers."""
from .base import HolderInfo, LockProvider, TableLock
from .in_process import InProcessLock
