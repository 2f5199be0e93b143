"""``horus profile``, ``horus predict`` and ``horus predictor train|build-tables|card|measure``.

Registration imports nothing heavy: torch is imported only inside ``horus profile`` and
``horus predictor build-tables`` (the ``[profile]`` extra), scikit-learn only inside
``horus predictor train``; ``horus predict`` needs neither.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from horus.common.errors import ValidationError
from horus.common.flags import count, integer, seconds
from horus.predictor.interface import PAIR_TEACH_HINT, pair_extrapolated
from horus.predictor.pairfeatures import PAIR_BASES

#: Largest file ``horus predict`` reads: a DLJob with its profile ConfigMap (itself <= 1 MiB).
MAX_MANIFEST_BYTES = 4 << 20
#: The largest batch a profile may state (the profile schema's batchSize bound).
MAX_BATCH_SIZE = 1_048_576
#: Seeds are 32-bit, as NumPy's and scikit-learn's are.
MAX_SEED = 2**32 - 1


def register(sub: Any) -> None:
    """Add ``horus profile``, ``horus predict`` and ``horus predictor …`` to ``sub``."""
    _add_profile(sub)
    _add_predict(sub)
    p = sub.add_parser("predictor", help="train and inspect the predictor model")
    psub = p.add_subparsers(dest="predictor_command", metavar="ACTION", required=True)
    _add_train(psub)
    _add_build_tables(psub)
    _add_measure(psub)
    card = psub.add_parser("card", help="print the model card of an artifact")
    card.add_argument("--model-file", type=Path, default=None)
    card.set_defaults(handler=_card)


def _add_profile(sub: Any) -> None:
    prof = sub.add_parser(
        "profile",
        help="write the graph profile of a PyTorch model (needs the [profile] extra)",
        description=(
            "Builds the model on PyTorch's meta device (no GPU, no weights), runs one training "
            "step's forward and backward pass and writes its features as a versioned YAML "
            "profile to put into a DLJob. Either --model package.module:factory with "
            "--input-shape, or --zoo NAME (see --list-zoo)."
        ),
    )
    what = prof.add_mutually_exclusive_group()
    what.add_argument("--model", help="package.module:factory returning an nn.Module")
    what.add_argument("--zoo", help="a reference-zoo model, e.g. resnet50")
    what.add_argument("--list-zoo", action="store_true", help="list the reference zoo and exit")
    prof.add_argument("--input-shape", help="one sample's shape without batch, e.g. 3,224,224")
    prof.add_argument("--input-dtype", default="float32", choices=["float32", "long"])
    prof.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), help="training batch size")
    prof.add_argument("--amp", action="store_true", help="automatic mixed precision")
    prof.add_argument("--optimizer", default=None, help="adam (default), adamw, sgd, none")
    prof.add_argument("--family", default="", help="architecture family label")
    prof.add_argument("-o", "--output", type=Path, help="write the YAML here (default: stdout)")
    prof.set_defaults(handler=_profile)


def _add_predict(sub: Any) -> None:
    pred = sub.add_parser(
        "predict",
        help="predict GPU utilisation and memory of a profiled job",
        description=(
            "Prints the predicted utilisation (%) and peak memory (MiB) of the job alone on "
            "a GPU, with their calibrated 90% upper bounds; with --with, also the normalised "
            "speed of each job when the two share the GPU."
        ),
    )
    pred.add_argument(
        "profile",
        type=Path,
        help="profile YAML written by 'horus profile', or a DLJob manifest with an inline profile",
    )
    pred.add_argument(
        "--gpu",
        default=os.environ.get("HORUS_PREDICT_GPU", "A100"),
        help="GPU model (env HORUS_PREDICT_GPU; default A100)",
    )
    pred.add_argument(
        "--with", dest="other", type=Path, help="a second profile (or DLJob) sharing the GPU"
    )
    pred.add_argument(
        "--model-file",
        type=Path,
        default=None,
        help="predictor artifact (default: the shipped one)",
    )
    pred.add_argument("--json", action="store_true", help="machine-readable output")
    pred.set_defaults(handler=_predict)


def _add_train(psub: Any) -> None:
    train = psub.add_parser(
        "train",
        help="train the predictor artifact (deterministic)",
        description=(
            "Trains the utilisation, memory and interference models from the shipped feature "
            "tables. Default: GPUMemNet (CC BY 4.0) + Gavel (MIT) only, as shipped. "
            "--with-lucid DIR adds Lucid's measurements (S-Lab License 1.0, NON-COMMERCIAL use "
            "only) for a model you train for yourself; --extra-rows adds rows observed in your "
            "cluster and --extra-pair-rows pair speeds measured there (the agent's "
            "--training-rows and --pair-rows files)."
        ),
    )
    train.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="artifact path (default: the packaged model-default.json)",
    )
    train.add_argument("--seed", type=integer(0, MAX_SEED), default=0)
    train.add_argument(
        "--with-lucid",
        type=Path,
        default=None,
        metavar="DIR",
        help="Lucid data folder (single_data.csv, colocate_info.csv)",
    )
    train.add_argument(
        "--extra-rows",
        type=Path,
        nargs="+",
        action="extend",
        default=None,
        metavar="CSV",
        help="observed rows: profile features + gpu, util, memory_mib (one file per node is fine)",
    )
    train.add_argument(
        "--extra-pair-rows",
        type=Path,
        nargs="+",
        action="extend",
        default=None,
        metavar="CSV",
        help="measured pair speeds: gpu, speed, a_/b_ + profile features (the agent's --pair-rows)",
    )
    train.add_argument(
        "--keep-simulated",
        action="store_true",
        help="keep --extra-rows/--extra-pair-rows rows whose backend column says simulated "
        "(the agent on simulated nodes writes them; by default they are dropped)",
    )
    train.add_argument(
        "--pair-base",
        choices=PAIR_BASES,
        default="contention_bound",
        help="contention_bound (default): the pair head learns corrections on top of "
        "min(1, 100/(u_a+u_b)) from the jobs' isolated utilisation, applied only on GPU models "
        "it has pairs from (elsewhere the bound alone); none: it predicts the speed itself",
    )
    train.set_defaults(handler=_train)


def _add_build_tables(psub: Any) -> None:
    tables = psub.add_parser(
        "build-tables",
        help="recompute the shipped feature tables from the measured data (needs torch)",
    )
    tables.add_argument(
        "--data-dir",
        type=Path,
        required=True,
        help="folder with gavel/, gpumemnet/ and (optionally) lucid/",
    )
    tables.add_argument("--out-dir", type=Path, default=None)
    tables.set_defaults(handler=_build_tables)


def _add_measure(psub: Any) -> None:
    meas = psub.add_parser(
        "measure",
        help="run zoo models on this machine's GPU, alone and in pairs, and write training rows",
        description=(
            "Runs each job's training step (synthetic data) alone on the GPU for a window, then "
            "each pair of jobs at once as two processes on that GPU, and writes what NVML and "
            "the step rates show: training-rows.csv and pair-rows.csv (for 'horus predictor "
            "train --extra-rows/--extra-pair-rows') and measure.json, which also compares the "
            "agent's utilisation-ratio pair estimate with the true speeds. Saves after every "
            "measurement; running it again on the same --output resumes. --device cpu is a dry "
            "run (step rates only, no rows). Needs torch; on a GPU also nvidia-ml-py."
        ),
    )
    meas.add_argument(
        "--jobs",
        nargs="+",
        required=True,
        metavar="JOB",
        help="ZOO:BATCH or ZOO:BATCH+amp (comma or space separated), or lucid / gavel for "
        "every configuration that data set measured",
    )
    meas.add_argument(
        "--pairs",
        default="all",
        help="all (every pair, a job with a copy of itself too), none, or sample:N",
    )
    meas.add_argument(
        "--seed", type=integer(0, MAX_SEED), default=0, help="seed of --pairs sample:N"
    )
    meas.add_argument("--device", default="cuda:0", help="cuda:N (default cuda:0) or cpu")
    meas.add_argument(
        "--window", type=seconds(), default=15.0, help="seconds each measurement counts steps"
    )
    meas.add_argument(
        "--warmup",
        type=integer(0, 100_000),
        default=10,
        help="steps each job runs before its window",
    )
    meas.add_argument(
        "--time-budget",
        type=seconds(positive=False),
        default=0.0,
        metavar="SECONDS",
        help="start no measurement that would end after this many seconds (0 = no limit)",
    )
    meas.add_argument(
        "--sharing",
        default="time-slicing",
        help="time-slicing (default: plain processes) or mps (workers are clients of the MPS "
        "control daemon already running, as Horus pods are with enforcement mps)",
    )
    meas.add_argument(
        "--mps-thread-percent",
        type=integer(1, 100),
        default=None,
        metavar="N",
        help="with --sharing mps: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of every job (a core share)",
    )
    meas.add_argument("-o", "--output", type=Path, required=True, help="output folder")
    meas.set_defaults(handler=_measure)


def _profile(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise ValidationError("horus profile needs PyTorch: pip install 'horus[profile]'") from exc
    from horus.predictor.schema import dump_profile
    from horus.predictor.zoo import ZOO, profile_zoo

    if args.list_zoo:
        for e in ZOO.values():
            print(
                f"{e.name:<20} {e.family:<15} input {','.join(map(str, e.input_shape))}  {e.note}"
            )
        return 0
    if args.batch_size is None or args.batch_size < 1:
        raise ValidationError("--batch-size must be a positive integer")
    if args.zoo:
        profile = profile_zoo(args.zoo, args.batch_size, amp=args.amp, optimizer=args.optimizer)
    elif args.model:
        from horus.predictor.features import parse_input_shape, profile_factory

        if not args.input_shape:
            raise ValidationError("--model needs --input-shape (one sample, e.g. 3,224,224)")
        profile = profile_factory(
            args.model,
            parse_input_shape(args.input_shape),
            args.batch_size,
            amp=args.amp,
            optimizer=args.optimizer or "adam",
            input_dtype=args.input_dtype,
            family=args.family,
        )
    else:
        raise ValidationError("give --model package.module:factory or --zoo NAME (--list-zoo)")
    text = dump_profile(profile, args.output)
    if args.output is None:
        print(text, end="")
    else:
        print(f"wrote {args.output}")
    return 0


def _load(args: argparse.Namespace) -> Any:
    from horus.predictor.model import load_default_predictor, load_predictor

    return load_predictor(args.model_file) if args.model_file else load_default_predictor()


def _load_profile_or_dljob(path: Path) -> Any:
    """The profile in ``path``: a ``horus profile`` file, or a DLJob manifest with its profile
    inline or in a ``configMapRef`` ConfigMap that the same file holds (as ``kubectl apply -f``
    files often do); a ConfigMap that is not there is named, with the command that fetches it.

    The file is read with the bounded readers (size, UTF-8, nesting, no aliases), so a binary
    or absurdly nested file is one clear error, never a traceback."""
    from horus.api.dljob import ConfigMapProfileRef, parse_dljob, parse_profile_document
    from horus.common.documents import load_yaml_all, read_text_file
    from horus.predictor.schema import profile_from_dict

    text = read_text_file(path, max_bytes=MAX_MANIFEST_BYTES)
    docs = load_yaml_all(text, str(path), max_bytes=MAX_MANIFEST_BYTES)
    if not docs:
        raise ValidationError(
            f"{path}: holds no document; give the YAML 'horus profile' writes, or a DLJob manifest"
        )
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "DLJob"]
    if not jobs:
        if len(docs) > 1:
            raise ValidationError(
                f"{path}: holds {len(docs)} documents and no DLJob; give one profile document "
                "(what 'horus profile' writes) or a DLJob manifest"
            )
        return profile_from_dict(docs[0], where=str(path))
    if len(jobs) > 1:
        raise ValidationError(
            f"{path} holds {len(jobs)} DLJobs; give a file with one (or a 'horus profile' file)"
        )
    try:
        job = parse_dljob(jobs[0])
    except ValidationError as exc:
        raise ValidationError(f"{path}: {exc}") from None
    source = job.spec.profile
    if isinstance(source, ConfigMapProfileRef):
        for d in docs:
            if not (isinstance(d, dict) and d.get("kind") == "ConfigMap"):
                continue
            meta, data = d.get("metadata"), d.get("data")
            if (
                isinstance(meta, dict)
                and meta.get("name") == source.name
                and isinstance(data, dict)
                and source.key in data
            ):
                where = f"{path} ConfigMap {source.name}[{source.key}]"
                source = parse_profile_document(str(data[source.key]), where)
                break
    if isinstance(source, ConfigMapProfileRef):
        key = source.key.replace(".", "\\.")
        raise ValidationError(
            f"{path}: DLJob {job.name} takes its profile from ConfigMap {source.name!r} (key "
            f"{source.key!r}), which this file does not hold; predict from that document: "
            f"kubectl get configmap {source.name} -o jsonpath='{{.data.{key}}}' > profile.yaml "
            "&& horus predict profile.yaml"
        )
    return profile_from_dict(source.to_document(), where=f"{path} spec.profile")


def _predict(args: argparse.Namespace) -> int:
    profile = _load_profile_or_dljob(args.profile)
    predictor = _load(args)
    r = predictor.predict(profile, args.gpu)
    out: dict[str, Any] = {
        "model": profile.model,
        "gpu": args.gpu,
        "util_percent": round(r.util_mean, 1),
        "util_upper": round(r.util_upper, 1),
        "memory_mib": round(r.memory_mib_mean),
        "memory_mib_upper": round(r.memory_mib_upper),
        "quantile": r.quantile,
        "low_confidence": r.low_confidence,
        "model_version": r.model_version,
    }
    if args.other is not None:
        other = _load_profile_or_dljob(args.other)
        out["with"] = other.model
        out["speed"] = round(predictor.pair_speed(profile, other, args.gpu), 3)
        out["speed_other"] = round(predictor.pair_speed(other, profile, args.gpu), 3)
        out["pair_low_confidence"] = pair_extrapolated(predictor, args.gpu)
        out["pair_gpus"] = list(predictor.card.get("pair_gpus", []))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    q = round(r.quantile * 100)
    print(f"{profile.model} (batch {profile.batch_size}) on {args.gpu}:")
    print(f"  GPU utilisation  {r.util_mean:6.1f} %    (p{q} upper {r.util_upper:6.1f} %)")
    print(
        f"  peak GPU memory  {r.memory_mib_mean:8.0f} MiB (p{q} upper {r.memory_mib_upper:8.0f} MiB)"
    )
    if r.low_confidence:
        print("  LOW CONFIDENCE: features lie outside the training data; intervals widened")
    if args.other is not None:
        print(
            f"  sharing with {out['with']}: speed {out['speed']:.3f}x, theirs {out['speed_other']:.3f}x"
        )
        if out["pair_low_confidence"]:
            print(
                f"  LOW CONFIDENCE (sharing): the pair model learned from pairs on "
                f"{', '.join(out['pair_gpus'])} only; on {args.gpu} its speeds are extrapolated "
                f"(the shipped one reads pessimistic on newer GPUs); {PAIR_TEACH_HINT}"
            )
    print(f"  model {r.model_version}")
    return 0


def _train(args: argparse.Namespace) -> int:
    import time

    from horus.predictor.model import DEFAULT_ARTIFACT
    from horus.predictor.train import save_artifact, train_artifact

    if args.with_lucid is not None and args.output is None:
        raise ValidationError(
            "a model trained --with-lucid uses non-commercial data and must not replace the "
            "shipped artifact: give -o PATH"
        )
    start = time.monotonic()
    artifact = train_artifact(
        seed=args.seed,
        include_lucid=args.with_lucid,
        extra_rows=args.extra_rows,
        extra_pair_rows=args.extra_pair_rows,
        keep_simulated=args.keep_simulated,
        pair_base=args.pair_base,
    )
    path = args.output or DEFAULT_ARTIFACT
    digest = save_artifact(artifact, path)
    print(
        f"wrote {path} ({artifact['version']}, sha256 {digest[:16]}…) in {time.monotonic() - start:.0f} s"
    )
    for k, v in artifact["card"]["metrics_heldout_family"].items():
        print(f"  {k}: {v}")
    return 0


def _build_tables(args: argparse.Namespace) -> int:
    from horus.predictor.tables import DATA_DIR, build_tables

    counts = build_tables(args.data_dir, args.out_dir or DATA_DIR)
    for name, n in counts.items():
        print(f"{name}: {n} rows")
    return 0


def _measure(args: argparse.Namespace) -> int:
    try:
        import torch
    except ImportError as exc:
        raise ValidationError(
            "horus predictor measure needs PyTorch: pip install 'horus[profile]'"
        ) from exc
    from horus.predictor.measure import (
        GpuSampler,
        Measurer,
        MeasureSettings,
        NoGpuSampler,
        NvmlSampler,
        check_mps_daemon,
        gpu_index,
        pairs_of,
        parse_jobs,
        proxy_summary,
    )

    jobs = parse_jobs(args.jobs)
    settings = MeasureSettings(
        jobs=tuple(jobs),
        pairs=tuple(pairs_of(jobs, args.pairs, args.seed)),
        out_dir=args.output,
        device=args.device,
        window_s=args.window,
        warmup_steps=args.warmup,
        time_budget_s=args.time_budget,
        sharing=args.sharing,
        mps_thread_percent=args.mps_thread_percent,
    )
    sampler: GpuSampler
    if settings.device == "cpu":
        sampler = NoGpuSampler()
    else:
        check_mps_daemon(settings.sharing)
        if not torch.cuda.is_available():
            raise ValidationError(
                f"--device {settings.device}: PyTorch sees no CUDA GPU "
                "(torch.cuda.is_available() is False); use --device cpu for a dry run"
            )
        sampler = NvmlSampler(gpu_index(settings.device))
    m = Measurer(settings, sampler)
    share = f", MPS threads {settings.mps_thread_percent} %" if settings.mps_thread_percent else ""
    print(
        f"measuring {len(settings.jobs)} jobs and {len(settings.pairs)} pairs on "
        f"{sampler.gpu_name or 'cpu (dry run: no rows)'}, {settings.window_s:g} s windows, "
        f"{settings.sharing}{share}"
    )
    counts = m.run()
    summary = proxy_summary(m.results)
    print(
        f"done: {counts['measured']} measured, {counts['already']} already there, "
        f"{counts['failed']} failed, {counts['left']} left; results in {args.output}"
    )
    if summary["pairs_with_estimate"]:
        print(
            f"agent's pair estimate vs step rates over {summary['pairs_with_estimate']} "
            f"speeds: bias {summary['estimate_bias']:+.3f}, MAE {summary['estimate_mae']:.3f}"
        )
    return 1 if counts["failed"] else 0


def _card(args: argparse.Namespace) -> int:
    p = _load(args)
    print(json.dumps({"version": p.version, **dict(p.card)}, indent=2))
    return 0
