"""How long does the ``paper`` profile take? Part II's sweeps at the paper's grids, timed one by one.

The ``paper`` profile (:data:`lipnb.profiles.PROFILES`) measures ``bert-base-uncased``, its masked twin and
random GPT-2 on the paper's grids. The BERT models come from the hub; this script times the sweeps whose models
are offline (``--models``, default the profile's random GPT-2), exactly as the chapters call them:

``real_text``
    :func:`lipnb.experiments.real_text.real_text_sweep` on every layer, *Alice* at ``alice_lengths`` and
    AG_NEWS at ``ag_news_lengths`` (``text_per_length`` windows per length; chapter 22);
``adversarial``
    :func:`lipnb.experiments.adversarial.adversarial_sweep` on every head of the profile's layers at
    ``adversarial_lengths`` (chapter 23).

Each sweep runs in this process with an empty results cache (a temporary ``$LIPNB_CACHE_DIR``), so its time
is the computation's. Sweeps start in the order above until ``--budget`` seconds have passed; the record says
which ran. Per sweep: wall seconds, layer calls (one ``local_lipschitz`` call per layer or head and length),
rows measured.

Usage::

    python bench/paper_profile.py --budget 240                  # on a GPU (lipnb.profiles.default_device())
    python bench/paper_profile.py --budget 60 --out /tmp/p.json  # a taste on a CPU

Writes ``lipnb.experiments.benchmark.record_path("paper-profile-<device>")`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import lipnb
from lipnb import models
from lipnb.experiments import adversarial, benchmark, real_text
from lipnb.profiles import PROFILES

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_lipschitz", Path(__file__).with_name("lipschitz.py"))
core = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(core)


def sweeps(name: str) -> list[tuple[str, int, Callable[[], object]]]:
    """The paper profile's sweeps of model ``name``: (label, layer calls, the call), in the chapters' order."""
    p = PROFILES["paper"]
    model, _ = models.load_shared(name)
    L, H = models.num_layers(model), model.config.num_attention_heads
    jobs = [(f"real_text {name} {dataset}", L * len(lengths),
             lambda dataset=dataset, lengths=lengths: real_text.real_text_sweep(name, dataset, lengths,
                                                                                p.text_per_length))
            for dataset, lengths in (("alice", p.alice_lengths), ("ag_news", p.ag_news_lengths))]
    radii = adversarial.adversarial_radii(name, p)
    return jobs + [(f"adversarial {name} layer {layer}", 2 * H * len(p.adversarial_lengths),
                    lambda layer=layer: adversarial.adversarial_sweep(name, layer, p.adversarial_lengths,
                                                                      float(radii[layer])))
                   for layer in range(L)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=[PROFILES["paper"].gpt2])
    parser.add_argument("--budget", type=float, default=240.0, help="start no sweep after this many seconds")
    parser.add_argument("--only", default="", help="run only the sweeps whose label contains this text")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    device = lipnb.profiles.default_device()      # where lipnb.models loads the models
    os.environ.setdefault("LIPNB_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    os.environ["LIPNB_CACHE_DIR"] = tempfile.mkdtemp(prefix="lipnb-paper-profile-")
    out = args.out or benchmark.record_path(f"paper-profile-{device.type}")
    started, commit = dt.datetime.now(dt.timezone.utc), core.git_commit()
    print(f"{core.device_name(device)}, torch {torch.__version__}, git {commit}", flush=True)
    rows, t0 = [], time.perf_counter()
    for name in args.models:
        for label, calls, job in sweeps(name):
            if args.only not in label:
                continue
            if time.perf_counter() - t0 > args.budget:
                rows.append({"sweep": label, "calls": calls, "ran": False})
                continue
            start = time.perf_counter()
            table = job()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            wall = time.perf_counter() - start
            rows.append({"sweep": label, "calls": calls, "ran": True, "rows": len(table.frame),
                         "wall_s": round(wall, 2)})
            print(f"{label}: {calls} calls, {len(table.frame)} rows, {wall:.1f} s", flush=True)
    record = {
        "schema": 1, "benchmark": "the paper profile's offline sweeps, timed one by one (empty results cache)",
        "profile": "paper",
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1),
        "device": device.type, "device_name": core.device_name(device), "threads": torch.get_num_threads(),
        "versions": core.versions(commit),
        "command": "python bench/paper_profile.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "runs": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    print(f"wrote {out} ({record['duration_s']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
