//! The Q1_0 × Q8_0 matrix-vector shader against the CPU's scalar kernel, on awkward shapes, on
//! the adapter `Gpu::new` picks (`OXIBONSAI_GPU_ADAPTER` to choose; CI: Mesa's lavapipe). No
//! adapter is a failure, never a skip.

mod common;

use common::{cpu_product, random_q1_0, Rng};
use std::sync::Arc;

use oxibonsai_gpu::{Gpu, GpuError, Q1Kernel, Q1Matrix, Q8Activation};

fn gpu() -> Gpu {
    match Gpu::new() {
        Ok(g) => {
            eprintln!("GPU adapter: {}", g.report());
            g
        }
        Err(e) => panic!("the GPU tests need an adapter: {e}"),
    }
}

fn check(gpu: &Gpu, kernel: Option<&Arc<Q1Kernel>>, rng: &mut Rng, n_rows: usize, n_in: usize) {
    let rows = random_q1_0(rng, n_rows, n_in);
    let x: Vec<f32> = (0..n_in).map(|_| rng.unit() * 4.0).collect();
    let (want, scale) = cpu_product(&rows, n_in, &x);
    let m = Q1Matrix::upload(gpu, &rows, n_rows, n_in).unwrap();
    let act = Q8Activation::quantize(&x).unwrap();
    let p = match kernel {
        Some(k) => m.product_with(gpu, k, &act).unwrap(),
        None => m.product(gpu, &act).unwrap(),
    };
    let (got, _) = gpu.run_q1_0(&p, 1).unwrap();
    assert_eq!(got.len(), n_rows);
    for (r, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
        // Both sum exact integer parts; only the float sums' order differs.
        let bound = 4e-6 * s + f32::MIN_POSITIVE;
        assert!(
            (g - w).abs() <= bound,
            "{n_rows}x{n_in} row {r}: GPU {g} CPU {w} (bound {bound})"
        );
    }
}

#[test]
fn q1_0_gemv_matches_the_scalar_kernel_on_awkward_shapes() {
    let gpu = gpu();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // The default split, then others: one row per invocation, rows not dividing the workgroup,
    // one lane per row set.
    let mut kernels = vec![None];
    for (lanes, rows) in [(32, 1), (4, 3), (16, 2), (1, 4)] {
        kernels.push(Some(gpu.q1_0_kernel(lanes, rows).unwrap()));
    }
    for kernel in &kernels {
        for &(n_rows, n_in) in &[
            (1, 128),
            (7, 256),
            (8, 384),
            (9, 128 * 33),
            (257, 2048),
            (1000, 4096 + 128),
            (31, 17408),
        ] {
            check(&gpu, kernel.as_ref(), &mut rng, n_rows, n_in);
        }
    }
    assert!(gpu.q1_0_kernel(3, 1).is_err() && gpu.q1_0_kernel(8, 5).is_err());
}

#[test]
fn q1_0_gemv_spans_two_dispatch_dimensions() {
    // More than 65,535 workgroups: the rows continue in the second dimension.
    let gpu = gpu();
    let rows_per_group = 256 / Q1Kernel::DEFAULT_LANES * Q1Kernel::DEFAULT_ROWS;
    check(
        &gpu,
        None,
        &mut Rng(7),
        65_535 * rows_per_group as usize + 13,
        128,
    );
}

#[test]
fn bad_shapes_are_refused_by_name() {
    let gpu = gpu();
    let e = Q1Matrix::upload(&gpu, &[0u8; 18], 1, 100).err().unwrap();
    assert!(e.to_string().contains("row length 100"), "{e}");
    let e = Q1Matrix::upload(&gpu, &[0u8; 17], 1, 128).err().unwrap();
    assert!(e.to_string().contains("need 18 bytes, got 17"), "{e}");
    let m = Q1Matrix::upload(&gpu, &[0u8; 36], 1, 256).unwrap();
    let x = Q8Activation::quantize(&[0.5; 128]).unwrap();
    let e = m.product(&gpu, &x).err().unwrap();
    assert!(matches!(e, GpuError::Shape { .. }), "{e}");
    assert!(Q8Activation::quantize(&[1.0; 33]).is_err());
}

#[test]
fn an_unknown_adapter_name_lists_what_exists() {
    let e = Gpu::with_adapter(Some("no-such-gpu-anywhere"))
        .err()
        .unwrap();
    let text = e.to_string();
    assert!(
        text.contains("no-such-gpu-anywhere") && text.contains("found"),
        "{text}"
    );
}
