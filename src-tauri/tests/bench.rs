//! `headroom bench --json` and `headroom bandwidth --json` end to end, on the
//! tiny demo model with tiny shapes: the structure, the counts, the labels.

use std::ffi::OsStr;

use crate::common::{headroom, headroom_with};

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn bench_json_has_raw_runs_a_summary_labels_and_the_roofline_and_is_saved() {
    let tmp = headroom_test_support::scratch("bench-bin");
    let dir = tmp.join("data");
    let data = dir.join("data");
    let model = dir.join("model");
    let m = model.to_string_lossy().into_owned();
    assert!(headroom(&["demo-model", &m, "--preset", "tiny", "--bits", "4"]).status.success());

    let env = [("HEADROOM_DATA_DIR", data.as_os_str())];
    let args = ["bench", &m, "-p", "16", "-n", "4", "-r", "2", "-d", "0,40", "--bandwidth", "50", "--json"];
    let v = json(&headroom_with(&args, &env));
    let labels = &v["labels"];
    assert_eq!(
        (labels["batch"].as_u64(), labels["prompt_tokens"].as_u64(), labels["gen_tokens"].as_u64()),
        (Some(1), Some(16), Some(4))
    );
    assert_eq!(labels["model_type"], "qwen2");
    assert_eq!(labels["quantization"]["bits"], 4);
    assert_eq!(labels["kv_dtype"], "bfloat16");
    // Linux runs MLX on its CPU backend, which gets the f32 kernel.
    assert_eq!(labels["quant_kernel"]["kind"], "cpu-f32");
    // A 4-bit model: below 48 rows each weight is unpacked once for all
    // rows where the CPU has AVX2 (every x86 CI machine), BLAS from there.
    #[cfg(target_arch = "x86_64")]
    let row_shared = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let row_shared = false;
    let kernel = &labels["quant_kernel"];
    if row_shared {
        assert_eq!(
            (kernel["row_shared_below_rows"].as_i64(), kernel["dequantize_from_rows"].as_i64()),
            (Some(48), Some(48))
        );
    } else {
        assert_eq!(
            (kernel["row_shared_below_rows"].as_i64(), kernel["dequantize_from_rows"].as_i64()),
            (None, Some(8))
        );
    }
    assert_eq!(v["bandwidth"]["source"], "given");
    assert!(v["machine"]["cpu_cores"].as_u64().is_some_and(|c| c >= 1));

    let depths = v["depths"].as_array().unwrap_or_else(|| panic!("depths: {v}"));
    assert_eq!(depths.len(), 2);
    for (d, want) in depths.iter().zip([0u64, 40]) {
        assert_eq!(d["depth"].as_u64(), Some(want));
        let runs = d["runs"].as_array().unwrap_or_else(|| panic!("runs: {d}"));
        assert_eq!(runs.len(), 2, "the warm-up is apart: {d}");
        assert_eq!(d["warmup"]["index"], 0);
        for run in runs {
            // The depth is really in the cache: each run starts at d and ends at d + p + n − 1.
            assert_eq!(run["context_tokens"].as_u64(), Some(want));
            assert_eq!(run["cache_tokens_after"].as_u64(), Some(want + 16 + 4 - 1));
            assert_eq!((run["prompt_tokens"].as_u64(), run["generated_tokens"].as_u64()), (Some(16), Some(4)));
            for key in ["ttft_ms", "prefill_tps", "decode_tps", "e2e_tps", "first_token_ms", "last_token_ms"] {
                assert!(run[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {run}");
            }
        }
        let s = &d["summary"]["decode_tps"];
        assert_eq!(s["n"], 2);
        let mean = runs.iter().filter_map(|r| r["decode_tps"].as_f64()).sum::<f64>() / 2.0;
        assert!((s["mean"].as_f64().unwrap_or_default() - mean).abs() < 1e-9, "{s} vs {mean}");
        assert!(s["sd"].as_f64().is_some());
        let roof = &d["roofline"];
        assert_eq!(roof["bandwidth_bytes_per_s"].as_f64(), Some(50e9));
        let pct = roof["achieved_percent"].as_f64().unwrap_or_default();
        assert!((pct - 100.0 * mean / roof["bound_tps"].as_f64().unwrap_or(1.0)).abs() < 1e-9, "{roof}");
        assert!(
            d["pressure"].is_string() && d["swap_delta_bytes"].is_i64() && d["peak_memory_bytes"].as_u64() > Some(0)
        );
    }
    // Saved by default: the database now exists in the data folder.
    assert!(std::fs::read_dir(&data).is_ok_and(|mut d| d.next().is_some()), "nothing saved in {}", data.display());
    // And measured: the fill to depth 40 prefilled it whole (one token
    // generated), so the fit at 41 positions rests on that measurement.
    let fit = json(&headroom_with(&["fit", &m, "--context", "41", "--json"], &env));
    assert!(fit["basis"].as_str().is_some_and(|b| b.starts_with("measured here at 41: ")), "{fit}");

    let out = headroom_with(&["bench", &m, "-p", "0", "--bandwidth", "50", "--no-save"], &env);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("headroom: invalid generation setting prompt tokens (-p) = 0: must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn bench_text_output_is_a_table_with_the_roofline() {
    let tmp = headroom_test_support::scratch("bench-text");
    let dir = tmp.join("data");
    let m = dir.to_string_lossy().into_owned();
    assert!(headroom(&["demo-model", &m, "--preset", "tiny", "--bits", "4"]).status.success());
    let out = headroom_with(
        &["bench", &m, "-p", "8", "-n", "3", "-r", "1", "--bandwidth", "20", "--no-save"],
        &[("HEADROOM_DATA_DIR", OsStr::new("/nonexistent"))],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("| model | quant | KV | batch | depth | test |"), "{text}");
    assert!(text.contains("| qwen2 | 4-bit g64 | bfloat16 | 1 | 0 | pp8 tg3 |"), "{text}");
    assert!(text.contains("roofline depth 0:") && text.contains("at 20.0 GB/s (given with --bandwidth)"), "{text}");
}

#[test]
fn bandwidth_json_reports_copy_and_triad() {
    let v = json(&headroom(&["bandwidth", "--array-mib", "8", "--passes", "2", "--json"]));
    let m = &v["measured"];
    assert_eq!((m["array_bytes"].as_u64(), m["passes"].as_u64()), (Some(8 << 20), Some(2)));
    for key in ["copy_gb_per_s", "triad_gb_per_s"] {
        assert!(m[key].as_f64().is_some_and(|x| x > 0.1), "{key} in {m}");
    }
    assert!(v["machine"]["total_memory_bytes"].as_u64() > Some(0));
    // This Linux machine is no Apple chip: no rated figure, said as null.
    #[cfg(not(target_os = "macos"))]
    assert!(v["rated"].is_null());
}
