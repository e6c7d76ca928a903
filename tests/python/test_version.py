"""The version has one source, the file VERSION, and the distribution's metadata is what PyPI
will show: CMake reads VERSION (tessera.__version__, `tessera --version`: tests/cli), and so does
scikit-build-core (pyproject.toml's [[tool.dynamic-metadata]]); the metadata a wheel would carry
is generated here without building (prepare_metadata_for_build_wheel: no CMake run)."""
import email
import os
import re
import subprocess
import sys

import pytest

import tessera

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VERSION = open(os.path.join(ROOT, "VERSION")).read().strip()
DIST_NAME = "tessera-moe"  # `tessera` on PyPI is an unrelated project


def test_the_version_file_is_one_semantic_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION
    assert open(os.path.join(ROOT, "VERSION")).read() == VERSION + "\n"


def test_the_module_version_is_the_version_file():
    assert tessera.__version__ == VERSION


def test_cmake_and_pyproject_write_no_version_of_their_own():
    cmake = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    assert re.search(r"project\(tessera VERSION \$\{TESSERA_VERSION\}", cmake)
    pyproject = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert not re.search(r"^version\s*=", pyproject, re.M)


@pytest.fixture(scope="module")
def metadata(tmp_path_factory):
    """The METADATA of the wheel `pip install .` would build (scikit-build-core, in a child
    process run from the repository root, as pip runs the build backend)."""
    pytest.importorskip("scikit_build_core")
    out = tmp_path_factory.mktemp("metadata")
    code = ("import sys; from scikit_build_core.build import prepare_metadata_for_build_wheel as p;"
            "print(p(sys.argv[1]))")
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    dist_info = r.stdout.strip().splitlines()[-1]
    with open(out / dist_info / "METADATA") as f:
        return email.message_from_file(f)


def test_metadata_name_version_license(metadata):
    assert metadata["Name"] == DIST_NAME
    assert metadata["Version"] == VERSION
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License-File"] == "LICENSE"
    assert "Apache License" in open(os.path.join(ROOT, "LICENSE")).read()
    assert any(u.startswith("Homepage, https://") for u in metadata.get_all("Project-URL"))


def test_torch_extra_is_the_range_the_tests_install(metadata):
    extra = [r for r in metadata.get_all("Requires-Dist") if 'extra == "torch"' in r]
    assert extra == ['torch>=2.10; extra == "torch"'], extra
    reqs = open(os.path.join(ROOT, "scripts", "requirements-test.txt")).read()
    assert re.findall(r"^torch\S*", reqs, re.M) == ["torch>=2.10"]
