"""Forecasts: when will a pending workload start, simulated forward with the same core (docs/forecast.md)."""
