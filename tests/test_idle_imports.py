"""What a `lite server` with its embedded agent loads before any request: the modules made lazy for its
footprint (issue 19: server + agent RSS with 2 pods) stay unloaded. Each is loaded at its first use: the
OpenAPI v2 and protobuf renderers and the v3 paths (first /openapi request), the autoscaling/v1 view (first such
object), the desired-state cache (a `lite agent`; the embedded one keeps none), the air-gap archive reader (first
tarball), the seccomp compiler (first container with a profile), the API server identity leases (a shared
datastore). Runs in a fresh interpreter: what is imported is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LAZY = (
    "lite.server.api.openapi_paths",
    "lite.server.api.openapi_v2",
    "lite.server.api.openapi_v2pb",
    "lite.server.api.versions.hpa",
    "lite.agent.cache",
    "lite.agent.images.archive",
    "lite.agent.seccomp",
    "lite.server.services.apiservers",
    "yaml",
)

CASE = r'''
import json, sys
from pathlib import Path
import lite.cli.main, lite.server.main, lite.server.controlplane, lite.cli.agentcmd
from lite.agent.agent import Agent, AgentConfig

async def dial(node, password):
    raise AssertionError("not dialled")

agent = Agent(AgentConfig("", "", node_name="n1", data_dir=Path(sys.argv[1]), dial=dial))
print(json.dumps(sorted(sys.modules)))
'''


def test_the_server_and_its_agent_leave_lazy_modules_unloaded(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CASE, str(tmp_path)], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert "lite.agent.agent" in loaded and "lite.server.controlplane" in loaded  # the case imported them
    assert sorted(m for m in loaded if m in LAZY or m.startswith(tuple(f"{n}." for n in LAZY))) == []


def test_lazy_modules_still_import() -> None:
    """Each lazily imported module is importable on its own (a missing optional part still fails loudly, at its
    first use, as at import before)."""
    case = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]"
    subprocess.run([sys.executable, "-c", case, *LAZY], check=True)


REGISTRIES = r"""
import json, sys
from pathlib import Path
from lite.agent.images.registries import RegistriesConfig, load_yaml
regs = RegistriesConfig.load(Path(sys.argv[1]))
plain = "yaml" in sys.modules
odd_text = "1: one\nwhen: 2024-01-02\n"
odd = load_yaml(odd_text)  # a key and a value JSON cannot carry: parsed here
import yaml
same = regs == RegistriesConfig.from_dict(yaml.safe_load(Path(sys.argv[1]).read_text()))
print(json.dumps([plain, list(regs.mirrors["docker.io"].endpoints), same, odd == yaml.safe_load(odd_text)]))
"""


def test_registries_yaml_is_parsed_in_a_child(tmp_path: Path) -> None:
    """The embedded agent's registries.yaml (read at start) leaves PyYAML out of the server process; a
    document JSON cannot carry exactly is parsed in the process, as `yaml.safe_load` would."""
    f = tmp_path / "registries.yaml"
    f.write_text('mirrors:\n  "docker.io":\n    endpoint: ["http://127.0.0.1:5000"]\n')
    out = subprocess.run([sys.executable, "-c", REGISTRIES, str(f)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, ["http://127.0.0.1:5000"], True, True]
