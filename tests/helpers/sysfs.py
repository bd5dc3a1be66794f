"""Sysfs trees laid out as the kernel lays them out on an EFA instance, for the counter reader and the exporter.

``/sys/class/infiniband/<dev>`` is a relative symlink into ``/sys/devices/<pci path>/infiniband/<dev>``; the port
counters are ``ports/<n>/hw_counters/<file>`` (one integer and a newline per file, plus the RDMA core's
``lifespan``); the device-level ``<dev>/hw_counters`` holds the driver's admin-command counters; ``<dev>/device``
points at the PCI function, whose ``driver`` link points into ``/sys/bus/pci/drivers/efa`` (not part of the mounted
trees, so it dangles in a pod, as it does here); ``/sys/module/efa/version`` is the module's version.

Counter names: the EFA driver's port stats (drivers/infiniband/hw/efa/efa_verbs.c ``EFA_DEFINE_PORT_STATS``: basic,
messages, RDMA read, RDMA write, network groups; efa_com_cmd.h ``efa_com_*_stats``) and device stats
(``EFA_DEFINE_DEVICE_STATS``). Device names follow the EFA udev naming ``rdmap<bus>s<slot>`` of the PCI address.
"""

from __future__ import annotations

from pathlib import Path

EFA_PORT_COUNTERS = (
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_wrs",
    "rdma_read_bytes",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_wrs",
    "rdma_write_bytes",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
EFA_DEVICE_COUNTERS = (
    "submitted_cmds",
    "completed_cmds",
    "cmds_err",
    "no_completion_cmds",
    "keep_alive_rcvd",
    "alloc_pd_err",
    "create_qp_err",
    "create_cq_err",
    "reg_mr_err",
    "alloc_ucontext_err",
    "create_ah_err",
    "mmap_err",
)
LIFESPAN_MS = 10
"""The RDMA core's default ``lifespan`` (ms the hardware stats are cached)."""
EFA_VERSION = "2.17.1g"


def efa_device(bus: int, slot: int) -> tuple[str, str]:
    """(udev name, PCI address): ``efa_device(16, 27)`` -> ``("rdmap16s27", "0000:10:1b.0")``."""
    return f"rdmap{bus}s{slot}", f"0000:{bus:02x}:{slot:02x}.0"


G6_12XLARGE = (efa_device(0, 30),)
"""One EFA interface (catalogue max_efa_interfaces for g6.12xlarge)."""
P5_48XLARGE = tuple(efa_device(bus, 0) for bus in range(0x10, 0x10 + 32))
"""32 EFA interfaces."""


def port_dir(sysfs: Path, dev: str, port: str = "1") -> Path:
    """The port's directory under /sys/devices (where the class symlink resolves)."""
    return next((sysfs / "devices").glob(f"pci0000:00/*/infiniband/{dev}")) / "ports" / port


def write_counter(sysfs: Path, dev: str, name: str, value: int | bytes, port: str = "1") -> None:
    hw = port_dir(sysfs, dev, port) / "hw_counters"
    (hw / name).write_bytes(value if isinstance(value, bytes) else f"{value}\n".encode())


def kernel_sysfs(
    sysfs: Path,
    devices: tuple[tuple[str, str], ...] = G6_12XLARGE,
    counters: dict[str, dict[str, int]] | None = None,
    version: str | None = EFA_VERSION,
    files: tuple[str, ...] = EFA_PORT_COUNTERS,
    driver: str = "efa",
) -> Path:
    """Write a kernel-shaped sysfs root at ``sysfs`` (its ``class``, ``devices`` and ``module`` trees).

    ``counters``: {dev: {file: value}} overrides (every other port counter is 0); ``version`` None: no efa module.
    """
    counters = counters or {}
    for dev, pci in devices:
        fn = sysfs / "devices" / "pci0000:00" / pci
        ib = fn / "infiniband" / dev
        hw = ib / "ports" / "1" / "hw_counters"
        hw.mkdir(parents=True)
        (ib / "ports" / "1" / "state").write_text("4: ACTIVE\n")
        for name in files:
            (hw / name).write_text(f"{counters.get(dev, {}).get(name, 0)}\n")
        (hw / "lifespan").write_text(f"{LIFESPAN_MS}\n")
        (ib / "hw_counters").mkdir()
        for name in EFA_DEVICE_COUNTERS:
            (ib / "hw_counters" / name).write_text("0\n")
        (ib / "hw_counters" / "lifespan").write_text(f"{LIFESPAN_MS}\n")
        (ib / "node_type").write_text("6: unspecified\n")
        (ib / "device").symlink_to(f"../../../{pci}")
        (fn / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
        cls = sysfs / "class" / "infiniband"
        cls.mkdir(parents=True, exist_ok=True)
        (cls / dev).symlink_to(f"../../devices/pci0000:00/{pci}/infiniband/{dev}")
    if not devices:
        (sysfs / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
    if version is not None:
        (sysfs / "module" / "efa").mkdir(parents=True, exist_ok=True)
        (sysfs / "module" / "efa" / "version").write_text(f"{version}\n")
    return sysfs


def as_mounted(host: Path, pod: Path, volumes: list[dict], mounts: list[dict]) -> None:
    """Each hostPath volume's tree appears at its mountPath under ``pod`` (copied with symlinks kept, as a bind
    shows them), so the pod's view of a host tree can be read as the container would."""
    import shutil

    by_name = {v["name"]: v["hostPath"]["path"] for v in volumes if "hostPath" in v}
    for m in mounts:
        if m["name"] in by_name:
            shutil.copytree(host / by_name[m["name"]].lstrip("/"), pod / m["mountPath"].lstrip("/"), symlinks=True)
