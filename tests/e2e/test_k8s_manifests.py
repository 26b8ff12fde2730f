"""jobs/k8s/: the KubeRay manifests validate against KubeRay's own CRD schemas
(tests/fixtures/kuberay, their source named in its README) read as the API server's strict field
validation reads them; the objects they name exist (the token Secret, the study's volume, the
job's ConfigMap, the cluster the RayJob selects); and the ncclsweep job they run passes
`ncclsweep validate`, matches the workers (GPUs per pod, the GPU label) and keeps its study on
the shared volume."""

from __future__ import annotations

import copy
import gzip
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "jobs" / "k8s"
SCHEMAS = REPO / "tests" / "fixtures" / "kuberay"
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def strict(schema):
    """The schema as strict field validation applies it: an object schema that lists its properties,
    allows no others and does not preserve unknown fields refuses a field it does not list."""
    schema = copy.deepcopy(schema)

    def close(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def crd(kind: str):
    name = {"RayCluster": "rayclusters", "RayJob": "rayjobs"}[kind]
    with gzip.open(SCHEMAS / f"ray.io_{name}.v1.schema.json.gz") as f:
        doc = json.load(f)
    assert doc["kind"] == kind and doc["group"] == "ray.io" and doc["version"] == "v1"
    schema = strict(doc["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(kind: str, obj) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in crd(kind).iter_errors(obj)]


def manifests() -> dict[str, dict]:
    """Every object of jobs/k8s/, by kind (one of each)."""
    out: dict[str, dict] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["kind"] not in out, f"two {doc['kind']} objects in jobs/k8s/"
            out[doc["kind"]] = doc
    return out


def test_the_manifests_are_the_expected_objects_with_valid_names():
    objs = manifests()
    assert set(objs) == {"Secret", "PersistentVolumeClaim", "RayCluster", "ConfigMap", "RayJob"}
    for obj in objs.values():
        name = obj["metadata"]["name"]
        assert DNS_1123.match(name) and len(name) <= 63, name
    assert objs["RayCluster"]["apiVersion"] == objs["RayJob"]["apiVersion"] == "ray.io/v1"


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_the_kuberay_objects_validate_against_the_crd_schema(kind):
    assert errors(kind, manifests()[kind]) == []


def test_the_schemas_refuse_what_the_api_server_refuses():
    cluster = manifests()["RayCluster"]
    misspelt = copy.deepcopy(cluster)
    misspelt["spec"]["workerGroupSpecs"][0]["rayStartParam"] = misspelt["spec"]["workerGroupSpecs"][0].pop(
        "rayStartParams")
    assert any("rayStartParam" in e for e in errors("RayCluster", misspelt))
    wrong_type = copy.deepcopy(cluster)
    wrong_type["spec"]["workerGroupSpecs"][0]["replicas"] = "2"
    assert any("replicas" in e for e in errors("RayCluster", wrong_type))
    no_template = copy.deepcopy(cluster)
    del no_template["spec"]["headGroupSpec"]["template"]
    assert errors("RayCluster", no_template)
    bad_container = copy.deepcopy(cluster)
    bad_container["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    assert errors("RayCluster", bad_container)
    job = copy.deepcopy(manifests()["RayJob"])
    job["spec"]["entrypoint"] = ["ncclsweep", "run"]
    assert any("entrypoint" in e for e in errors("RayJob", job))


def _volumes(template) -> dict[str, dict]:
    return {v["name"]: v for v in template["spec"]["volumes"]}


def _mounts(template) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for c in template["spec"]["containers"] for m in c.get("volumeMounts", [])}


def test_the_objects_they_name_exist():
    objs = manifests()
    cluster, job = objs["RayCluster"], objs["RayJob"]
    # the Ray auth token: the Secret KubeRay reads, under the key it reads
    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": objs["Secret"]["metadata"]["name"]}
    assert objs["Secret"]["stringData"]["auth_token"]
    head = cluster["spec"]["headGroupSpec"]["template"]
    workers = [g["template"] for g in cluster["spec"]["workerGroupSpecs"]]
    pvc = objs["PersistentVolumeClaim"]["metadata"]["name"]
    assert "ReadWriteMany" in objs["PersistentVolumeClaim"]["spec"]["accessModes"]
    for template in [head, *workers]:  # the study's folder, at one path on every pod
        claims = {n for n, v in _volumes(template).items()
                  if v.get("persistentVolumeClaim", {}).get("claimName") == pvc}
        assert claims and {_mounts(template)[n] for n in claims} == {"/studies"}
    # the job's ConfigMap on the head, where the RayJob's entrypoint reads the job
    config_volume = next(n for n, v in _volumes(head).items()
                         if v.get("configMap", {}).get("name") == objs["ConfigMap"]["metadata"]["name"])
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["ncclsweep", "run"]
    job_file = Path(argv[2])
    assert job_file.parent == Path(_mounts(head)[config_volume]) and job_file.name in objs["ConfigMap"]["data"]
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}


def _written_job(tmp_path, storage_line: str | None = None) -> Path:
    data = manifests()["ConfigMap"]["data"]
    for name, text in data.items():
        if name == "job.yaml" and storage_line is not None:
            text = re.sub(r"^# (storage: .*)$", r"\1", text, count=1, flags=re.M)
            assert "\nstorage: postgresql" in text
        (tmp_path / name).write_text(text)
    return tmp_path / "job.yaml"


@pytest.mark.parametrize("storage", [None, "postgresql"], ids=["journal", "postgresql"])
def test_the_job_they_run_validates(tmp_path, storage):
    job_file = _written_job(tmp_path, storage)
    done = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(job_file)], capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in done.stdout
    if storage:
        assert "postgresql+psycopg2://" in done.stdout


def test_the_job_matches_the_workers_it_runs_on(tmp_path):
    from orchestrator.config.job import load_job

    job = load_job(_written_job(tmp_path))
    cluster = manifests()["RayCluster"]
    group = cluster["spec"]["workerGroupSpecs"][0]
    container = group["template"]["spec"]["containers"][0]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == job.gpus_per_node
    assert int(container["resources"]["requests"]["nvidia.com/gpu"]) == job.gpus_per_node
    label = group["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
    assert job.ray.node_selector["gpu_model"] in label.split("-")  # NVIDIA-H100-PCIe is Ray's H100
    assert job.ray.address == "auto"  # the cluster the RayJob's driver runs in
    assert Path(job.report_dir).is_relative_to("/studies")  # on the shared volume
    assert job.storage.startswith("journal:/studies/")
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"  # no trial on the head
    images = {c["image"] for t in [head["template"], group["template"]] for c in t["spec"]["containers"]}
    assert len(images) == 1  # the driver and the trials run the same ncclsweep
