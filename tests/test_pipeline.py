"""The backends' pipelines, built and cut by stage name (`nasir.lowering.pipeline`)."""

from __future__ import annotations

import pytest

from nasir.errors import NasirError
from nasir.lowering.passes import available_passes, parse_pipeline
from nasir.lowering.pipeline import CODEGEN, GRAPH, LLVM, SCHEDULE, TVM_PIPELINE, llvm_pipeline


def test_every_stage_is_a_registered_pass_and_the_stages_make_the_llvm_pipeline():
    assert set(LLVM.names) <= set(available_passes())
    assert LLVM.names == GRAPH.names + SCHEDULE.names + CODEGEN.names
    assert TVM_PIPELINE == "fold-batch-norm,convert-nn-to-nest,lower-batch-norm,fuse-epilogue,fold-scale,presum"


def test_cuts_by_name():
    assert LLVM.until("default-schedule").names[-3:] == ["presum", "subsample-strided-1x1", "default-schedule"]
    assert LLVM.before("subsample-strided-1x1") == GRAPH
    assert LLVM.since("convert-nest-to-loops") == CODEGEN
    assert LLVM.after("nest-bufferize") == CODEGEN
    assert "fuse-epilogue" not in LLVM.without("fuse-epilogue").names
    assert len(LLVM.without("fuse-epilogue").passes) == len(LLVM.passes) - 1
    with pytest.raises(NasirError, match="no pass 'winograd'"):
        LLVM.until("winograd")


def test_options_are_spelled_as_nasir_opt_reads_them():
    pipeline = llvm_pipeline(profile=True, checked=True, tuning="/tmp/a b.db")
    assert pipeline.passes[pipeline.index("default-schedule")] == 'default-schedule{tuning="/tmp/a b.db"}'
    assert pipeline.passes[-1] == "convert-loops-to-llvm{profile=true checked=true}"
    assert pipeline.names == LLVM.names
    assert llvm_pipeline() == LLVM
    parsed = parse_pipeline(str(pipeline)).passes
    assert parsed[pipeline.index("default-schedule")].tuning == "/tmp/a b.db"
    assert parsed[-1].profile and parsed[-1].checked
