"""Campaigns: one spec swept over backends x seeds x spec variants x worlds, one run per cell.

A campaign file (YAML, validated, unknown keys rejected, paths relative to the file) names the
matrix; every cell is an ordinary run folder DIR/cells/<backend>-s<seed>-<variant>-<scene>/
(bag, run.json, report/) made by `simconform.run.run` and `verify_run`, so everything that
reads a run reads a cell. Beside run.json, cell.json holds the cell's input hash (spec variant
content, world + mesh + trajectory file hashes, seed, backend, duration, storage, interpolation,
confidence, simconform version): a cell whose run is complete, verified and has the same hash
is not run again, so an interrupted or extended campaign resumes where it stopped.

DIR also holds specs/<variant>.yaml (the variant specs the cells ran), campaign.json,
campaign.md, junit.xml and plots/ (simconform.campaign.report), and .campaign-token. Cells of
an earlier matrix that the file no longer names stay on disk but out of the report. `--force`
runs every cell again.

A campaign file::

    spec: ../sensors_spec/rover.yaml          # default: the demo spec, world and trajectory
    backends: [reference]
    seeds: {start: 1, count: 8}               # or a list: [1, 2, 3]
    variants:                                 # name -> overrides of the spec
      nominal: {}
      sigma2x: {noise_scale: 2.0}             # every noise sigma of every sensor times 2
      lidar5cm: {sensors.lidar.noise.range.sigma: 0.05}   # dotted path -> value
    worlds: [{world: ../worlds/demo.yaml, trajectory: ../worlds/demo.tum}]
    duration: 5.0                             # s, or auto (planned per variant and world,
                                              # as `run --duration auto`); default: whole
    interpolation: spline                     # or linear (`simconform run --interpolation`)
    confidence: 0.95
    localize: false                           # true: also `simconform localize` every cell

Executors:

- ``local``: a ``concurrent.futures.ProcessPoolExecutor`` (spawn, so no fork of a threaded
  driver) of ``--jobs`` workers, at most one cell in flight per worker. A worker that dies
  (``BrokenProcessPool``) breaks the whole pool and every cell in flight with it; those cells
  are retried once, each in its own one-process pool, so the second attempt is attributed
  exactly: a cell that dies there too is reported ``crashed`` and the campaign goes on.
- ``ray``: each cell is a Ray task (``num_cpus=1``, ``max_retries=0``: retries are ours) on
  the cluster at ``--address`` (``local`` starts ``ray.init(num_cpus=jobs)`` in-process,
  ``auto`` joins a running cluster, ``ray://host:port`` is Ray Client). A task that dies
  (``WorkerCrashedError``, node death, OOM kill) is retried once, then reported ``crashed``.
  ``--jobs`` is num_cpus for ``local`` and a cap on cells in flight on a cluster (default: as
  many as the cluster schedules). Every node needs simconform installed.

Files come back to DIR either way. Inputs always travel with a Ray task (spec variant text,
world + meshes + trajectory bytes, put once in the object store). The worker runs in place,
straight into DIR/cells/<id>/, when it sees DIR's ``.campaign-token`` with this campaign's
token and every input file with the driver's hash (a shared filesystem); otherwise it runs in a
scratch folder and returns the run folder as an uncompressed tar, which the driver unpacks into
DIR/cells/<id>/. The bytes are identical either way; only the input paths written in such a
cell's run.json and report name the worker's scratch copies (cell.json names the driver's).

Backends are shipped to workers by their registry entry ("module:Class"), so a backend that
the driver registered at run time in ``simconform.registry.BACKENDS`` (a plugin) runs in the
workers too, provided its module is importable there. That is the only hook the tests use.

Where things are:

- ``plan``: the campaign file model (CampaignFile), load_campaign, variants, scenes, cells, Plan
- ``cell``: execute_cell / timed_cell, what runs inside a worker (pool process or Ray task)
- ``local``: LocalExecutor, the spawn-context process pool
- ``ray_executor``: RayExecutor, import_ray (Ray is imported only when it is chosen)
- ``store``: the campaign folder: its token, cell.json records, done_record, finish_cell
- ``driver``: run_campaign, which ties the above together
- ``progress``: CampaignProgress and the status SYMBOLs
- ``summary`` / ``report`` / ``plots``: the campaign report's statistics, its campaign.json,
  campaign.md and junit.xml, and its figures (imported only when the report is written);
  ``localization``: with ``localize: true``, APE across seeds per variant and its plot
"""

from simconform.campaign.cell import execute_cell, timed_cell
from simconform.campaign.driver import run_campaign
from simconform.campaign.local import LocalExecutor
from simconform.campaign.plan import CampaignFile, Cell, Plan, load_campaign
from simconform.campaign.progress import SYMBOL
from simconform.campaign.ray_executor import RayExecutor
from simconform.campaign.store import TOKEN_FILE, done_record, finish_cell, scene_bundle

__all__ = [
    "SYMBOL",
    "TOKEN_FILE",
    "CampaignFile",
    "Cell",
    "LocalExecutor",
    "Plan",
    "RayExecutor",
    "done_record",
    "execute_cell",
    "finish_cell",
    "load_campaign",
    "run_campaign",
    "scene_bundle",
    "timed_cell",
]
