"""The oracle zoo's commands: ``kernelaudit check`` and ``kernelaudit oracle-table``."""

from .check import check_command, table_command

COMMANDS = {"check": check_command, "oracle-table": table_command}
