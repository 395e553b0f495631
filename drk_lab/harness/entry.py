"""How the harness starts its own processes: `COMMAND serve ...` (the zygote) or `COMMAND worker FD` (a
fresh worker for the spawn isolation, its job and then the acknowledgement on stdin)."""

from __future__ import annotations

import sys

# named by this module's own __name__, so that moving the module cannot leave a stale path behind
COMMAND = [sys.executable, "-c", f"import sys; from {__name__} import main; main(sys.argv[1:])"]


def main(argv: list[str]) -> None:
    if argv[0] == "serve":
        from drk_lab.harness.zygote import serve

        serve(argv[1], argv[2], argv[3], int(argv[4]), argv[5] == "1", int(argv[6]))
    elif argv[0] == "worker":
        from drk_lab.common.processes import enter_worker
        from drk_lab.harness.protocol import Job, read_line
        from drk_lab.harness.settings import current, read_only_paths
        from drk_lab.harness.worker import protect, run_job

        enter_worker(None, current().scratch_bytes, read_only_paths())
        job = Job.from_json(read_line(0))
        protect(read_only_paths(), job.device)
        run_job(job, int(argv[1]), 0)
