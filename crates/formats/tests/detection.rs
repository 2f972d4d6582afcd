//! Run-time tier detection. The emulated runs know which CPU model they emulate and say which
//! tier detection must choose (`OXIBONSAI_EXPECT_BEST_ISA`: `neon` under qemu's `cortex-a53`,
//! which has no dot-product instructions; the top ARM tier under `-cpu max`).

use oxibonsai_formats::kernels::{Isa, Kernels};

#[test]
fn detection_chooses_the_tier_the_cpu_model_has() {
    let best = Isa::best();
    assert!(
        best.available(),
        "best tier {} is not available",
        best.name()
    );
    // No tier ranked above it is available.
    let rank = Isa::ALL
        .iter()
        .position(|&isa| isa == best)
        .expect("a tier");
    for isa in &Isa::ALL[rank + 1..] {
        assert!(
            !isa.available(),
            "{} is available above the best tier {}",
            isa.name(),
            best.name()
        );
    }
    let kernels = Kernels::new(best).expect("the best tier builds its kernels");
    assert_eq!(kernels.isa(), best);
    if std::env::var_os("OXIBONSAI_ISA").is_none() {
        assert_eq!(Kernels::from_env().expect("no setting").isa(), best);
    }
    if let Ok(expected) = std::env::var("OXIBONSAI_EXPECT_BEST_ISA") {
        let expected = Isa::parse(&expected).expect("OXIBONSAI_EXPECT_BEST_ISA names a tier");
        assert_eq!(
            best.name(),
            expected.name(),
            "detection chose {} where the emulated CPU model has {}",
            best.name(),
            expected.name()
        );
    }
}
