"""The constant table of a Windows model, read from the wrapper source inductor wrote."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

WRAPPER = """
    constants_info_[0].name = "net_0_weight";
    constants_info_[0].dtype = cached_torch_dtype_float32;
    constants_info_[0].offset = 0;
    constants_info_[0].data_size = 2560;
    constants_info_[0].from_folded = false;
    constants_info_[0].type = static_cast<int32_t>(torch::aot_inductor::ConstantType::Parameter);
    constants_info_[0].shape = {64, 10};
    constants_info_[0].original_fqn = "net.0.weight";
    constants_info_[1].name = "scale";
    constants_info_[1].data_size = 16;
    constants_info_[1].from_folded = false;
    constants_info_[1].type = static_cast<int32_t>(torch::aot_inductor::ConstantType::Buffer);
    constants_info_[1].original_fqn = "scale";
"""


def test_rows_come_in_index_order_with_their_kind_and_size() -> None:
    from kiln.actions.windows.constant_table import rows

    table = rows(WRAPPER)
    assert [(r.name, r.fqn, r.type, r.data_size, r.from_folded) for r in table] == [
        ("net_0_weight", "net.0.weight", 1, 2560, False),
        ("scale", "scale", 2, 16, False),
    ]


def test_a_row_without_its_size_fails_naming_the_field() -> None:
    from kiln.actions.spec import ActionFailure
    from kiln.actions.windows.constant_table import rows

    with pytest.raises(
        ActionFailure, match=r"constant 0 of the wrapper source lacks \['data_size'\]"
    ):
        rows(WRAPPER.replace("constants_info_[0].data_size = 2560;", ""))
