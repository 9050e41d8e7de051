"""torch_xla diagnostics: parse metrics reports and debug logs, read live metrics, diagnose what is slow."""

from nbdebug.core._findings import Finding, Fix, Severity
from nbdebug.core.xla.debuglog import DebugEvent, DebugLog, Frame, parse_debug_log
from nbdebug.core.xla.diagnose import StepStats, XlaDiagnosis, diagnose
from nbdebug.core.xla.live import XlaCellReport, XlaWatch, available, read_live, watch
from nbdebug.core.xla.report import Counter, Metric, MetricsReport, parse_report

__all__ = [
    "Counter",
    "DebugEvent",
    "DebugLog",
    "Finding",
    "Fix",
    "Frame",
    "Metric",
    "MetricsReport",
    "Severity",
    "StepStats",
    "XlaCellReport",
    "XlaDiagnosis",
    "XlaWatch",
    "available",
    "diagnose",
    "parse_debug_log",
    "parse_report",
    "read_live",
    "watch",
]
