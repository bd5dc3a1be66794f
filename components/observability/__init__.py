"""Observability: Prometheus, Grafana and DCGM, the fabric alert rules and the fabric dashboard."""
