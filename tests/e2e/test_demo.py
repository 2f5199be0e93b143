"""The one-command demo, start to finish, and the dashboards proven against it.

Why one test: the demo *is* the e2e environment a cluster admin sees — helm-installed Horus, the
operator and agent authenticating as the chart's ServiceAccounts, a real Prometheus — so it is
the only place where every Grafana panel can be shown to have data. The test runs the quick
variant (``horus dev demo up --quick``, what ``DEMO_QUICK=1 make demo`` runs), then:

* evaluates EVERY panel query of ``dashboards/*.json`` (template variables substituted) through
  the demo's Prometheus HTTP API and requires data — and, because ``… or vector(0)`` panels
  always "have data", also requires every metric name a panel mentions to have series, so a
  dashboard over a metric nothing exports fails;
* checks the run-time correction (issue 17): at least one job was moved, the live table and
  the job's Events say so, and afterwards no GPU holds jobs whose summed predicted utilisation
  exceeds 100 % while another GPU could take one of them (its share fits there and the sum
  stays at or below 100 %); on real nodes the moved job's new container resumed from the
  checkpoint its old one wrote on SIGTERM;
* refuses a second ``up`` with a clear message;
* runs ``tools/dev/demo.sh down`` (what ``make demo-down`` runs) and checks that none of the
  demo's processes is left and none of its ports still listens.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from horus.devcluster.demo_state import REPORT_FILE, DemoState
from horus.devcluster.prometheus import discovered_pods

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dashboards as dash

from realnode_host import real_node_host

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """A command that ran past ``timeout`` is a failed one (exit -9, its output kept), not an
    exception: ``demo up`` killed midway has already started a cluster (real kubelets, host
    bridges and iptables chains), and the test's ``demo down`` must still run."""
    try:
        return subprocess.run(
            args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        return subprocess.CompletedProcess(
            args, -9, out or "", f"{err or ''}\ntimed out after {timeout:.0f}s"
        )


def _series(url: str, expr: str) -> int:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as resp:
        return len(json.load(resp)["data"]["result"])


def _panels_without_data(url: str) -> list[str]:
    boards = dash.load()
    missing: list[str] = []
    for (board, panel), results in dash.evaluate_all(url, boards).items():
        for query, n in results:
            if n == 0:
                missing.append(f"{board} / {panel} [{query.ref}]: {query.expr}")
            for name in sorted(dash.metric_names(query.expr)):
                if _series(url, f'count({{__name__="{name}"}})') == 0:
                    missing.append(f"{board} / {panel} [{query.ref}]: metric {name} has no series")
    return missing


def _filtered_panels_wrong(url: str) -> list[str]:
    """Pick one node and GPU (one a pod shares) as a Grafana user would: every series a panel
    then shows belongs to them, and every panel of the node & GPU board still has data."""
    q = urllib.parse.urlencode({"query": "max by (node, gpu) (horus_pod_gpu_core_share_ratio > 0)"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as resp:
        pick = json.load(resp)["data"]["result"][0]["metric"]
    wrong: list[str] = []
    results = dash.evaluate_series(url, chosen={"node": pick["node"], "gpu": pick["gpu"]})
    for (board, panel), queries in results.items():
        for query, series in queries:
            for s in series:
                labels = s.get("metric", {})
                if (
                    labels.get("node", pick["node"]) != pick["node"]
                    or labels.get("gpu", pick["gpu"]) != pick["gpu"]
                ):
                    wrong.append(f"{board} / {panel} [{query.ref}] shows {labels}")
            if board == "horus-node-gpu.json" and not series:
                wrong.append(f"{board} / {panel} [{query.ref}] has no data for {pick}")
    return wrong


def _each_container_got_its_own_share(state: DemoState) -> None:
    """On real nodes each DLJob replica is a container of the example workload image; its
    first log line is the share it received, which must be its own pod's signed assignment."""
    from horus.api.assignment import decode_assignment
    from horus.common import constants as c

    kubectl = [str(Path(state.bin_dir) / "kubectl"), "--kubeconfig", state.kubeconfig]
    pods = json.loads(
        subprocess.run(
            [*kubectl, "get", "pods", "-l", c.LABEL_DLJOB_NAME, "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["items"]
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    assert len(running) >= 4, [p["metadata"]["name"] for p in pods]
    for pod in running:
        meta = pod["metadata"]
        a = decode_assignment(meta["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])
        logs = subprocess.run(
            [*kubectl, "logs", meta["name"]], capture_output=True, text=True, check=True
        ).stdout
        share = json.loads(logs.splitlines()[0])
        assert share["event"] == "share", logs[:300]
        env = share["env"]
        assert (env[c.ENV_POD_NAME], env[c.ENV_GPU_UUID], env[c.ENV_GPU_CORE_PERCENT]) == (
            meta["name"],
            a.gpu_uuid,
            str(a.core_percent),
        ), f"{meta['name']} got {env}"


def _kubectl(state: DemoState, *args: str) -> str:
    kubectl = [str(Path(state.bin_dir) / "kubectl"), "--kubeconfig", state.kubeconfig]
    return subprocess.run(
        [*kubectl, *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def _crowded_gpus_with_a_better_place(
    jobs: list[dict[str, Any]], nodes: list[dict[str, Any]], slices: list[dict[str, Any]]
) -> list[str]:
    """GPUs holding two or more jobs whose summed predicted utilisation exceeds 100 %, where
    one of those jobs would fit on another GPU (core share, memory, not beside another replica
    of itself) and keep that GPU's sum at or below 100 %. The GPUs: the device plugin's node
    inventory, or on the dra path the DRA driver's ResourceSlices."""
    from horus.api.inventory import decode_inventory
    from horus.common import constants as c
    from horus.node.claim_checks import slice_gpus

    memory = {
        (n["metadata"]["name"], d.index): d.memory_mib
        for n in nodes
        if c.ANNOTATION_GPU_INVENTORY in (n["metadata"].get("annotations") or {})
        for d in decode_inventory(n["metadata"]["annotations"][c.ANNOTATION_GPU_INVENTORY])
    }
    for n in nodes:
        for d in slice_gpus(slices, n["metadata"]["name"]):
            memory[(n["metadata"]["name"], d.index)] = d.memory_mib
    on: dict[tuple[str, int], list[tuple[str, float, int, int]]] = {g: [] for g in memory}
    for job in jobs:
        st = job.get("status") or {}
        if st.get("phase") not in ("Scheduled", "Running"):
            continue
        util = float((st.get("predicted") or {}).get("utilMean") or 0.0)
        for p in st.get("placements") or []:
            on[(p["node"], p["gpuIndex"])].append(
                (job["metadata"]["name"], util, p["corePercent"], p["memoryMiB"])
            )
    found = []
    for gpu, here in on.items():
        if len(here) < 2 or sum(u for _, u, _, _ in here) <= 100:
            continue
        for name, util, core, mem in here:
            for other, there in on.items():
                if other == gpu or any(n == name for n, _, _, _ in there):
                    continue
                if (
                    sum(u for _, u, _, _ in there) + util <= 100
                    and sum(k for _, _, k, _ in there) + core <= 100
                    and sum(m for _, _, _, m in there) + mem <= memory[other]
                ):
                    found.append(f"{name} on {gpu} ({here}) could go to {other} ({there})")
    return found


def _moved_to_a_better_place(state: DemoState, out: str, real: bool) -> None:
    """At least one move, shown in the live table and the Events; no crowded GPU left that a
    move could relieve; on real nodes the moved job resumed from its checkpoint."""
    jobs = json.loads(_kubectl(state, "get", "dljobs", "-o", "json"))["items"]
    moved = [j for j in jobs if ((j.get("status") or {}).get("migrations") or {}).get("count")]
    assert moved, "no job was moved:\n" + out[-3000:]
    assert any(" moved " in line for line in out.splitlines()), out[-3000:]
    assert "moved from " in out, "the live table should say where a moved job came from"
    nodes = json.loads(_kubectl(state, "get", "nodes", "-o", "json"))["items"]
    slices = json.loads(_kubectl(state, "get", "resourceslices", "-o", "json"))["items"]
    crowded = _crowded_gpus_with_a_better_place(jobs, nodes, slices)
    assert not crowded, "after the moves:\n" + "\n".join(crowded)
    for job in moved:
        name = job["metadata"]["name"]
        assert (job["status"].get("phase"), job["status"].get("migration")) == ("Running", None)
        events = _kubectl(
            state, "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )
        reasons = {e.get("reason"): e.get("message", "") for e in json.loads(events)["items"]}
        assert "summed normalised speed" in reasons.get("Migrated", ""), reasons
        if real:
            log = _kubectl(state, "logs", f"{name}-0")
            resumed = [json.loads(x) for x in log.splitlines() if '"resumed"' in x]
            assert resumed and resumed[0]["step"] > 0, f"{name}-0 did not resume:\n{log[:2000]}"


def _each_replicas_claim_shown_with_its_share(state: DemoState, out: str) -> None:
    """Real nodes run the dra path (the chart's auto on 1.37): ``demo up`` printed
    ``kubectl get resourceclaims`` with one claim per replica, reserved for that replica's pod,
    with its GPU and consumed share — the share its DLJob's record gave it (jobs placed once:
    a moved job's claim of the printed moment may be its old one)."""
    lines = out.splitlines()
    start = [i for i, line in enumerate(lines) if "kubectl get resourceclaims -A -l" in line]
    assert start, "demo up did not print the ResourceClaims:\n" + out[-3000:]
    rows = {}
    for line in lines[start[0] + 1 :]:
        cells = line.split()
        if len(cells) != 7 or not cells[1].endswith("-gpu"):
            continue
        rows[cells[1]] = cells  # NAMESPACE CLAIM POD NODE GPU CORES MEMORY
    jobs = json.loads(_kubectl(state, "get", "dljobs", "-o", "json"))["items"]
    checked = 0
    for job in jobs:
        st = job.get("status") or {}
        if st.get("phase") != "Running" or (st.get("migrations") or {}).get("count"):
            continue
        for rec in st.get("placements") or []:
            claim = f"{rec['pod']}-gpu"
            assert claim in rows, f"{claim} not in the printed claims:\n" + "\n".join(
                " ".join(r) for r in rows.values()
            )
            _, _, pod, node, gpu, cores, memory = rows[claim]
            assert (pod, node, gpu, int(cores)) == (
                rec["pod"],
                rec["node"],
                f"gpu-{rec['gpuIndex']}",
                int(rec["corePercent"]),
            ), rows[claim]
            assert memory != "<none>", rows[claim]
            checked += 1
    assert checked >= 4, rows  # resnet50-train x2, bert-finetune, lstm-lm at least


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _ours(marker: str) -> list[str]:
    """Command lines of live processes that mention the demo folder."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            found.append(f"{proc.name}: {cmd[:200]}")
    return found


def test_demo_start_to_finish_dashboards_have_data_and_down_leaves_nothing(
    tmp_path: Path,
) -> None:
    host = nullcontext() if os.environ.get("DEMO_KWOK") else real_node_host()
    with host:  # real nodes: one such cluster per host at a time
        _demo_start_to_finish(tmp_path)


def _demo_start_to_finish(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HORUS_", "DEMO_"))},
        "HORUS_DEMO_DIR": str(folder),
        "DEMO_QUICK": "1",
    }
    if "HORUS_BIN_DIR" in os.environ:
        env["HORUS_BIN_DIR"] = os.environ["HORUS_BIN_DIR"]
    if os.environ.get("DEMO_KWOK"):  # the kwok variant: the checks below read it too
        env["DEMO_KWOK"] = os.environ["DEMO_KWOK"]
    horus = [sys.executable, "-m", "horus", "dev", "demo"]
    t0 = time.monotonic()
    up = _run([*horus, "up"], env, timeout=420)
    took = time.monotonic() - t0
    state = DemoState.load(folder)
    try:
        assert up.returncode == 0, f"demo up failed after {took:.0f}s:\n{up.stdout}\n{up.stderr}"
        assert state is not None
        out = up.stdout
        # the story: placements with predictions, the refused job's reason, the explore lines
        assert "kubectl get dljobs" in out and state.prometheus_url in out
        assert "does-not-fit" in out and "largest GPU" in out
        assert any(
            line.startswith("whole-cluster") and "Queued" in line and len(line.split()) > 6
            for line in out.splitlines()
        ), "the whole-cluster gang should wait in the queue with a reason"
        report = folder / REPORT_FILE
        assert report.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and report.stat().st_size > 20_000

        # every panel of every dashboard has data in the demo's Prometheus
        deadline = time.monotonic() + 30  # rate()/increase() need two scrapes in their window
        missing = _panels_without_data(state.prometheus_url)
        while missing and time.monotonic() < deadline:
            time.sleep(3)
            missing = _panels_without_data(state.prometheus_url)
        assert not missing, "dashboard queries without data:\n" + "\n".join(missing)
        if not os.environ.get("DEMO_KWOK"):  # targets found through the apiserver, no list
            found = discovered_pods(state.prometheus_url)
            assert set(found) == {"horus-operator", "horus-agent"}, found
        # and filtered by node and GPU
        wrong = _filtered_panels_wrong(state.prometheus_url)
        assert not wrong, "panels that do not follow the node/GPU choice:\n" + "\n".join(wrong)

        # Horus moved a job to a better GPU once the hog's was free, and it shows
        _moved_to_a_better_place(state, out, real=not os.environ.get("DEMO_KWOK"))

        # real containers did the jobs' work: every running replica printed its own share
        if not os.environ.get("DEMO_KWOK"):
            _each_container_got_its_own_share(state)
            _each_replicas_claim_shown_with_its_share(state, out)

        # a second `up` is refused, clearly, and leaves the running demo alone
        again = _run([*horus, "up"], env, timeout=60)
        assert again.returncode != 0 and "already up" in again.stderr, again.stderr
        assert _series(state.prometheus_url, "up") >= 2
    finally:
        cluster = (
            json.loads((Path(state.cluster_dir) / "state.json").read_text())
            if (state and (Path(state.cluster_dir) / "state.json").exists())
            else {"ports": {}}
        )
        down = _run(["bash", "tools/dev/demo.sh", "down"], env, timeout=120)
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout

    # nothing left: no process mentions the folder, no recorded port listens
    assert state is not None
    for _ in range(20):
        if not _ours(str(folder)):
            break
        time.sleep(0.5)
    assert not _ours(str(folder)), _ours(str(folder))
    ports = {**state.ports, **{f"cluster {k}": v for k, v in cluster["ports"].items()}}
    assert len(ports) >= 5, ports
    listening = {name: port for name, port in ports.items() if _listening(port)}
    assert not listening, f"still listening after demo-down: {listening}"
    assert sorted(p.name for p in folder.iterdir()) == [REPORT_FILE]
    print(f"quick demo up took {took:.0f}s")


def test_demo_down_without_a_demo_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "HORUS_DEMO_DIR": str(tmp_path / "none")}
    down = _run([sys.executable, "-m", "horus", "dev", "demo", "down"], env, timeout=60)
    assert down.returncode == 0 and "nothing to stop" in down.stdout
