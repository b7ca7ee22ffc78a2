"""report/labels.py: a figure names each configuration by what sets it apart from the others at its device count."""

import pandas as pd

from scalelab.report import labels

LADDER = pd.DataFrame({"world_size": [1, 2, 2, 2, 4], "num_nodes": [1, 1, 2, 2, 1],
                       "link": ["", "", "emulated 2 Gbit/s", "emulated 200 Mbit/s", ""]})


def test_the_demo_ladder_is_named_by_nodes_and_link_rate():
    assert labels.names(LADDER) == ["1 dev", "2 dev, 1 node", "2 dev, 2 nodes, emulated 2 Gbit/s",
                                    "2 dev, 2 nodes, emulated 200 Mbit/s", "4 dev"]
    assert labels.names(LADDER.iloc[[2]], sep="\n") == ["2 dev\n2 nodes\nemulated 2 Gbit/s"]


def test_two_links_at_one_device_count_are_told_apart_by_their_rate_alone():
    links = pd.DataFrame({"world_size": [2, 2], "num_nodes": [2, 2], "link": ["emulated 1 Gbit/s",
                                                                              "emulated 200 Mbit/s"]})
    assert labels.names(links) == ["2 dev, 2 nodes, emulated 1 Gbit/s", "2 dev, 2 nodes, emulated 200 Mbit/s"]


def test_a_configuration_alone_at_its_device_count_says_only_what_is_not_the_default():
    sweep = pd.DataFrame({"world_size": [1, 8, 16], "num_nodes": [1, 1, 2], "link": ["", "", ""]})
    assert labels.names(sweep) == ["1 dev", "8 dev", "16 dev, 2 nodes"]  # no "1 node" where nothing else ran


def test_a_lever_is_named_only_where_it_differs_at_one_device_count():
    hooks = pd.DataFrame({"world_size": [1, 2, 2], "num_nodes": [1, 1, 1], "link": ["", "", ""],
                          "comm_hook": ["none", "none", "bf16"], "accumulate_grad_batches": [1, 4, 4]})
    assert labels.names(hooks) == ["1 dev", "2 dev, comm hook none", "2 dev, comm hook bf16"]


def test_a_series_is_named_by_what_its_points_share():
    assert labels.shared(LADDER, LADDER.index[[0, 1]]) == "1 node"  # the one-node line of the ladder
    assert labels.shared(LADDER, LADDER.index[[3]]) == "2 dev, 2 nodes, emulated 200 Mbit/s"
    assert labels.shared(LADDER, LADDER.index[[0, 4]]) == ""  # 1 and 4 devices: nothing to add
