"""`r3forge quickstart`: the whole toolkit end to end on a laptop-class CPU, with a REPORT.md."""

from r3forge.quickstart.plan import QuickstartConfig, Stage, build_stages
from r3forge.quickstart.stages import main

__all__ = ["QuickstartConfig", "Stage", "build_stages", "main"]
