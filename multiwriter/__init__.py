from .table.table import Table
from . import errors
