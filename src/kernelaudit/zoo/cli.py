"""The oracle zoo's commands: ``kernelaudit check``, ``kernelaudit oracle-table`` and ``kernelaudit mutate``."""

from .check import check_command, table_command
from .mutate.cli import mutate_group, suite_group

COMMANDS = {"check": check_command, "oracle-table": table_command, "mutate": mutate_group, "suite": suite_group}
