"""Scheduler plugins, one module each (upstream `pkg/scheduler/framework/plugins/*`); see `framework.py`."""
