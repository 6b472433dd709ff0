"""gpulab.profiler: reading Nsight Compute's CSV, on output captured from a real run.

The sample below is verbatim ncu 2025 output (``--csv --print-units base``,
details page) from the H100 this lab records on, for two of chapter 2's kernels
on the small case; parsing needs no GPU.
"""
import pandas as pd
import pytest

from gpulab import profiler

SAMPLE = r'''
==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling results may be inconsistent.
==PROF== Connected to process 453 (/usr/bin/python3.12)
==PROF== Disconnected from process 453
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","3,731,968"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","109,408"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","","13,945,893"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum","","27,755"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","","924,800"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","sector","3,814,400"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","launch__occupancy_limit_registers","block","6"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","launch__registers_per_thread","register/thread","35"
"0","453","python3.12","127.0.0.1","fused_shared","1","7","(256, 1, 1)","(3200, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","56.86"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","3,729,408"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","45,184"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","","819,367"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum","","26,243"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","","179,840"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","sector","5,090,304"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","launch__occupancy_limit_registers","block","2"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","launch__registers_per_thread","register/thread","125"
"1","453","python3.12","127.0.0.1","whole_net_registers","1","7","(256, 1, 1)","(264, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","24.75"
'''


def test_parse_reads_every_metric_of_every_launch():
    rows = profiler.parse_csv(SAMPLE)
    assert list(rows.columns) == profiler.COLUMNS
    assert rows.groupby("id").size().tolist() == [9, 9]
    assert set(rows["kernel"]) == {"fused_shared", "whole_net_registers"}
    first = rows[rows["id"] == 0].set_index("name")["value"]
    # Thousands separators are ncu's formatting, not part of the number.
    assert first["shared_load_bank_conflicts"] == 13_945_893
    assert first["registers_per_thread"] == 35
    assert first["achieved_occupancy_pct"] == pytest.approx(56.86)
    assert rows.loc[rows["metric"] == "gpu__time_duration.sum", "unit"].iloc[0] == "ns"


def test_per_launch_is_one_row_per_kernel_with_sectors_per_request():
    table = profiler.per_launch(profiler.parse_csv(SAMPLE))
    assert table["kernel"].tolist() == ["fused_shared", "whole_net_registers"]
    assert table.loc[0, "sectors_per_request"] == pytest.approx(3_814_400 / 924_800)
    assert table.loc[1, "occupancy_limit_registers"] == 2


def test_noise_around_the_csv_is_skipped():
    noisy = "driver says hello\n==PROF== Connected\n" + SAMPLE + "\nlast print of the driver\n"
    assert len(profiler.parse_csv(noisy)) == 18


def test_output_without_a_csv_header_is_an_error_that_quotes_it():
    with pytest.raises(profiler.ProfilerError, match="(?s)no Nsight Compute CSV header.*ERR_NVGPUCTRPERM"):
        profiler.parse_csv("==ERROR== ERR_NVGPUCTRPERM - no permission to access counters\n")


def test_per_launch_of_nothing_says_the_filter_matched_nothing():
    with pytest.raises(profiler.ProfilerError, match="kernel-name filter"):
        profiler.per_launch(pd.DataFrame(columns=profiler.COLUMNS))


def test_command_leaves_clocks_alone_and_filters_kernels():
    cmd = profiler.command(["python3", "driver.py"], ["a.sum", "b.avg"], kernel_regex="^(k1|k2)$",
                           log_file="/tmp/x.csv")
    assert cmd[:3] == ["ncu", "--csv", "--print-units"]
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--metrics") + 1] == "a.sum,b.avg"
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:^(k1|k2)$"
    assert cmd[-2:] == ["python3", "driver.py"]
    with pytest.raises(ValueError, match="at least one"):
        profiler.command(["x"], [])


def test_profile_without_ncu_says_where_it_comes_from(monkeypatch):
    monkeypatch.setattr(profiler, "ncu_path", lambda: None)
    with pytest.raises(profiler.ProfilerError, match="not on PATH"):
        profiler.profile(["python3", "-c", "pass"], ["a.sum"])


def test_every_counter_a_chapter_reads_has_one_short_name():
    # The chapters' metric sets come from one place; a counter never has two names, and no two
    # counters share one except the instruction count (summed per SM or per SM sub-partition).
    from gpulab.workloads.convpool import record as convpool_record
    from gpulab.workloads.fcnet import profile as fcnet_profile
    from gpulab.workloads.training import record as training_record
    for metrics in (convpool_record.PROFILE_METRICS, fcnet_profile.PROFILE_METRICS, training_record.PROFILE_METRICS,
                    profiler.UTILISATION_METRICS, profiler.STALL_METRICS):
        assert set(metrics) <= set(profiler.SHORT_NAMES), set(metrics) - set(profiler.SHORT_NAMES)
    names = pd.Series(profiler.SHORT_NAMES)
    shared = names[names.duplicated(keep=False)]
    assert set(shared.index) == {"sm__inst_executed.sum", "smsp__inst_executed.sum"}
    stall = SAMPLE.replace("sm__warps_active.avg.pct_of_peak_sustained_active",
                           "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio")
    assert profiler.per_launch(profiler.parse_csv(stall)).loc[0, "stall_barrier"] == pytest.approx(56.86)


def test_profile_launches_retries_without_the_stall_counters_and_never_raises(monkeypatch, capsys):
    asked = []

    def profile(driver, metrics, kernel_regex=None, timeout=600):
        asked.append(list(metrics))
        if "stall.ratio" in metrics:
            raise profiler.ProfilerError("unknown metric stall.ratio")
        return profiler.parse_csv(SAMPLE)
    monkeypatch.setattr(profiler, "ncu_path", lambda: "/usr/bin/ncu")
    monkeypatch.setattr(profiler, "profile", profile)
    table = profiler.profile_launches("x", ["driver"], ["a.sum"], kernel_regex=".", timeout=1, stalls=["stall.ratio"])
    assert asked == [["a.sum", "stall.ratio"], ["a.sum"]] and table["id"].tolist() == [0, 1]
    assert "x: the profile with 2 metrics failed: unknown metric stall.ratio" in capsys.readouterr().out
    monkeypatch.setattr(profiler, "profile", lambda *a, **k: (_ for _ in ()).throw(profiler.ProfilerError("boom")))
    assert profiler.profile_launches("x", ["driver"], ["a.sum"], kernel_regex=".", timeout=1) is None
    monkeypatch.setattr(profiler, "ncu_path", lambda: None)
    assert profiler.profile_launches("x", ["driver"], ["a.sum"], kernel_regex=".", timeout=1) is None
    assert "x: no ncu here" in capsys.readouterr().out
