"""The layers' rules, read from the sources' imports:

- the sidecar and the consumer SDK import the contract and the assignor, never each other;
  the contract imports only the assignor (and third-party clients); the assignor nothing of ours;
- inside the SDK, the lake sinks never import the consumer, its pipeline or the record path
  (a sink is handed batches), and the record path never imports the consumer or the sinks;
- the local Kafka clusters and the local Kubernetes control plane (tests, demo, benchmarks)
  are never imported by the product;
- aiokafka's internals (the names its own code keeps private, its modules past the public
  API) are touched in one room per layer: the wire protocol below both sides
  (``contract.kafka_client``), the consumer's fetcher and group coordinator
  (``consumer_sdk.kafka_client``) and the assignor's aiokafka plugin (``assignor.plugin``);
- no module imports itself through others, and no folder holds more than 20 modules."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import aiokafka
import pytest

ROOT = Path(__file__).parent.parent
PRODUCT = (
    "assignor",
    "contract",
    "consumer_sdk",
    "sidecar",
    "kafka_autoscaler",
    "local_kafka",
    "local_kube",
)
HARNESS = {"local_kafka", "local_kube"}
THE_CONSUMER = {
    "consumer_sdk.consumer",
    "consumer_sdk.cli",
    "consumer_sdk.kafka_client.cooperative",
}
FORBIDDEN: dict[str, set[str]] = {
    "assignor": {"contract", "consumer_sdk", "sidecar", "kafka_autoscaler"} | HARNESS,
    "contract": {"consumer_sdk", "sidecar", "kafka_autoscaler"} | HARNESS,
    "sidecar": {"consumer_sdk", "kafka_autoscaler"} | HARNESS,
    "consumer_sdk": {"sidecar", "kafka_autoscaler"} | HARNESS,
    "consumer_sdk.pipeline": THE_CONSUMER | {"consumer_sdk.lake"},
    "consumer_sdk.records": THE_CONSUMER | {"consumer_sdk.pipeline", "consumer_sdk.lake"},
    "consumer_sdk.lake": THE_CONSUMER
    | {"consumer_sdk.pipeline", "consumer_sdk.records", "consumer_sdk.share"},
    # A share member reaches its sink through the Sink protocols alone.
    "consumer_sdk.share": THE_CONSUMER
    | {"consumer_sdk.pipeline", "consumer_sdk.records", "consumer_sdk.lake"},
    # The launcher imports each command by name once its extra is checked, never up front.
    "kafka_autoscaler.launch": {"consumer_sdk", "sidecar"} | HARNESS,
    "local_kafka": {"sidecar", "kafka_autoscaler", "local_kube"}
    | THE_CONSUMER
    | {"consumer_sdk.pipeline"},
    "local_kube": {"sidecar", "kafka_autoscaler", "consumer_sdk"},
}
MAX_MODULES_PER_FOLDER = 20
AIOKAFKA_ROOMS = ("contract.kafka_client", "consumer_sdk.kafka_client", "assignor.plugin")
AIOKAFKA_PUBLIC = {
    "aiokafka",
    "aiokafka.abc",
    "aiokafka.admin",
    "aiokafka.admin.config_resource",  # the resources the admin client's methods take
    "aiokafka.errors",
    "aiokafka.helpers",
    "aiokafka.structs",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules() -> dict[str, Path]:
    return {
        module_name(path): path for package in PRODUCT for path in (ROOT / package).rglob("*.py")
    }


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """Every module of ours ``path`` imports, at the top or inside a function; ``from a
    import b`` names ``a.b`` where that is a module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                names.add(child if child in known else node.module)
    return names


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def rules_for(module: str) -> set[str]:
    return set().union(*(banned for owner, banned in FORBIDDEN.items() if within(module, owner)))


def test_every_package_has_rules() -> None:
    packages = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in {"tests", "benchmarks", "examples", "fuzz", "scripts"}
    }
    assert packages == set(PRODUCT)
    assert {owner.split(".")[0] for owner in FORBIDDEN} == set(PRODUCT)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_what_is_below_it(package: str) -> None:
    modules = product_modules()
    offenders = {
        name: sorted(
            imported
            for imported in imported_modules(path, set(modules))
            for banned in rules_for(name)
            if within(imported, banned) and not within(name, banned)
        )
        for name, path in sorted(modules.items())
        if within(name, package)
    }
    assert {name: found for name, found in offenders.items() if found} == {}
    assert offenders, f"no module in {package}"


def cycles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        yield sorted(component)


def test_no_import_circle() -> None:
    modules = product_modules()
    known = set(modules)
    graph = {
        name: {m for m in imported_modules(path, known) if m in known and m != name}
        for name, path in modules.items()
    }
    assert graph["consumer_sdk.lake.lake_session"], "the graph lost its edges"
    assert list(cycles(graph)) == []


def test_cycles_are_found() -> None:
    assert list(cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == [["a", "b", "c"]]


def test_no_folder_holds_more_than_twenty_modules() -> None:
    # The product's packages and the project's commands; the suite (tests/) is one module
    # per subject, side by side on purpose.
    roots = (*PRODUCT, "benchmarks", "examples", "fuzz")
    folders = {path.parent for package in roots for path in (ROOT / package).rglob("*.py")}
    counts = {
        str(folder.relative_to(ROOT)): sum(
            1 for path in folder.glob("*.py") if path.name != "__init__.py"
        )
        for folder in folders
    }
    assert "consumer_sdk" in counts
    assert {folder: n for folder, n in counts.items() if n > MAX_MODULES_PER_FOLDER} == {}


def aiokafka_private_names() -> set[str]:
    """Every ``_name`` aiokafka's own code sets on its objects or defines as a method."""
    names: set[str] = set()
    for path in Path(aiokafka.__file__).parent.rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"self\.(_[a-z]\w*)", text))
        names |= set(re.findall(r"^\s*(?:async\s+)?def (_[a-z]\w*)", text, re.MULTILINE))
    return names


def aiokafka_reaches(path: Path, private: set[str]) -> list[str]:
    """Where ``path`` imports an aiokafka module past its public API or reaches one of
    ``private`` on anything but its own ``self``/``cls`` (an attribute, or a name given to
    getattr, setattr or hasattr)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and not node.level:
            modules = [node.module or ""]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            modules = []
        found += [
            f"line {line}: {module}"
            for module in modules
            if within(module, "aiokafka") and module not in AIOKAFKA_PUBLIC
        ]
        if isinstance(node, ast.Attribute) and node.attr in private:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in {"self", "cls"}):
                found.append(f"line {line}: .{node.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in private
        ):
            found.append(f"line {line}: {node.func.id} {node.args[1].value}")
    return found


def test_aiokafka_internals_are_touched_in_their_rooms_only() -> None:
    private = aiokafka_private_names()
    assert {"_coordinator", "_client", "_fetcher", "_get_actions_per_node"} <= private
    reaches = {
        name: found
        for name, path in sorted(product_modules().items())
        if not any(within(name, room) for room in AIOKAFKA_ROOMS)
        and (found := aiokafka_reaches(path, private))
    }
    assert reaches == {}


def test_a_reach_into_aiokafka_is_found(tmp_path: Path) -> None:
    source = tmp_path / "reaching.py"
    source.write_text(
        "from aiokafka.consumer import fetcher\n"
        "from aiokafka.errors import KafkaError\n"
        "coordinator = consumer._coordinator\n"
        "found = getattr(consumer, '_fetcher', None)\n"
        "self._client = None\n"
    )
    assert aiokafka_reaches(source, {"_coordinator", "_fetcher", "_client"}) == [
        "line 1: aiokafka.consumer",
        "line 3: ._coordinator",
        "line 4: getattr _fetcher",
    ]
