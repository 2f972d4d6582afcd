//! The instruction-set tiers: which ones this CPU runs, and the one `OXIBONSAI_ISA` forces.

/// Instruction-set tiers, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL/DQ (+ VNNI where the CPU has it, chosen inside the kernels).
    Avx512,
    /// aarch64 Advanced SIMD (ARMv8.0: every aarch64 CPU).
    Neon,
    /// NEON + SDOT/UDOT (ARMv8.2 dot product).
    Dotprod,
    /// Dotprod + SMMLA/USMMLA (ARMv8.6 int8 matrix multiply), for the matrix-matrix kernels.
    I8mm,
}

/// The architecture a tier's kernels run on (the scalar tier runs on all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    Any,
    X86_64,
    Aarch64,
}

#[derive(Debug, thiserror::Error)]
pub enum IsaError {
    #[error(
        "OXIBONSAI_ISA='{value}' is not a tier: use scalar, avx2, avx512, neon, dotprod or i8mm"
    )]
    Unknown { value: String },
    #[error("OXIBONSAI_ISA={isa} but this CPU lacks it (best available: {best})")]
    Unsupported {
        isa: &'static str,
        best: &'static str,
    },
}

impl Isa {
    /// Every tier, lowest first within each architecture (the x86 tiers, then the ARM ones).
    pub const ALL: [Isa; 6] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::Avx512,
        Isa::Neon,
        Isa::Dotprod,
        Isa::I8mm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
            Isa::Dotprod => "dotprod",
            Isa::I8mm => "i8mm",
        }
    }

    fn arch(self) -> Arch {
        match self {
            Isa::Scalar => Arch::Any,
            Isa::Avx2 | Isa::Avx512 => Arch::X86_64,
            Isa::Neon | Isa::Dotprod | Isa::I8mm => Arch::Aarch64,
        }
    }

    /// Whether `Kernels::new(self)` folds in the table of tier `lower`: the scalar tier and the
    /// tiers of `self`'s architecture up to `self` (never another architecture's, whatever the
    /// enum's order).
    pub(crate) fn folds(self, lower: Isa) -> bool {
        lower.arch() == Arch::Any || (lower.arch() == self.arch() && lower <= self)
    }

    pub fn parse(value: &str) -> Result<Isa, IsaError> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(value.trim()))
            .ok_or_else(|| IsaError::Unknown {
                value: value.to_owned(),
            })
    }

    /// Whether this CPU can run the tier.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.available()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512dq")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[cfg(target_arch = "aarch64")]
            Isa::Dotprod => {
                Isa::Neon.available() && std::arch::is_aarch64_feature_detected!("dotprod")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::I8mm => {
                Isa::Dotprod.available() && std::arch::is_aarch64_feature_detected!("i8mm")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The best tier this CPU runs.
    pub fn best() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|isa| isa.available())
            .unwrap_or(Isa::Scalar)
    }

    /// `OXIBONSAI_ISA` if set (an error if it names an unknown tier or one this CPU lacks),
    /// otherwise the best tier.
    pub fn from_env() -> Result<Isa, IsaError> {
        Isa::from_setting(std::env::var("OXIBONSAI_ISA").ok().as_deref())
    }

    /// [`Isa::from_env`] for the value `OXIBONSAI_ISA` has (`None`: unset).
    fn from_setting(value: Option<&str>) -> Result<Isa, IsaError> {
        match value {
            Some(value) if !value.trim().is_empty() => {
                let isa = Isa::parse(value)?;
                if !isa.available() {
                    return Err(IsaError::Unsupported {
                        isa: isa.name(),
                        best: Isa::best().name(),
                    });
                }
                Ok(isa)
            }
            _ => Ok(Isa::best()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_are_refused() {
        for isa in Isa::ALL {
            assert_eq!(Isa::parse(isa.name()).unwrap(), isa);
            assert_eq!(
                Isa::parse(&format!(" {} ", isa.name().to_uppercase())).unwrap(),
                isa
            );
        }
        assert!(matches!(Isa::parse("sse2"), Err(IsaError::Unknown { .. })));
        assert_eq!(Isa::from_setting(None).unwrap(), Isa::best());
        assert_eq!(Isa::from_setting(Some(" ")).unwrap(), Isa::best());
        assert_eq!(Isa::from_setting(Some("scalar")).unwrap(), Isa::Scalar);
    }

    #[test]
    fn the_best_tier_is_available_and_a_missing_tier_names_it() {
        let best = Isa::best();
        assert!(best.available() && Isa::Scalar.available());
        for isa in Isa::ALL.into_iter().filter(|isa| !isa.available()) {
            match Isa::from_setting(Some(isa.name())) {
                Err(IsaError::Unsupported { isa: name, best: b }) => {
                    assert_eq!((name, b), (isa.name(), best.name()))
                }
                other => panic!("{isa:?} on a CPU without it: {other:?}"),
            }
        }
    }

    #[test]
    fn a_tier_folds_the_scalar_tier_and_its_own_architecture_only() {
        assert!(Isa::Avx512.folds(Isa::Scalar) && Isa::Avx512.folds(Isa::Avx2));
        assert!(Isa::Dotprod.folds(Isa::Scalar) && Isa::Dotprod.folds(Isa::Neon));
        assert!(Isa::I8mm.folds(Isa::Neon) && Isa::I8mm.folds(Isa::Dotprod));
        for (isa, lower) in [
            (Isa::Neon, Isa::Avx2),
            (Isa::Neon, Isa::Avx512),
            (Isa::Dotprod, Isa::Avx512),
            (Isa::Avx512, Isa::Neon),
            (Isa::Avx2, Isa::Avx512),
            (Isa::Neon, Isa::Dotprod),
            (Isa::Dotprod, Isa::I8mm),
            (Isa::I8mm, Isa::Avx2),
            (Isa::Avx512, Isa::I8mm),
            (Isa::Scalar, Isa::Avx2),
            (Isa::Scalar, Isa::Neon),
        ] {
            assert!(!isa.folds(lower), "{isa:?} must not fold {lower:?}");
        }
    }

    /// Off x86 the x86 tiers are refused, naming the best tier this CPU has.
    #[cfg(not(target_arch = "x86_64"))]
    #[test]
    fn the_x86_tiers_are_refused_off_x86() {
        let best = Isa::best().name();
        for isa in [Isa::Avx2, Isa::Avx512] {
            assert!(!isa.available());
            match Isa::from_setting(Some(isa.name())) {
                Err(IsaError::Unsupported { best: b, .. }) => assert_eq!(b, best),
                other => panic!("{isa:?} off x86: {other:?}"),
            }
        }
    }

    /// On aarch64 NEON is always there, and the best tier is the highest ARM one present
    /// (`i8mm` under `qemu-aarch64 -cpu max`, as `scripts/test-aarch64.sh` runs; `neon` under
    /// `-cpu cortex-a53`, which has neither the dot product nor the matrix multiply).
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn the_best_tier_on_aarch64_is_the_highest_arm_tier_present() {
        assert!(Isa::Neon.available());
        let dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
        let want = if dotprod && std::arch::is_aarch64_feature_detected!("i8mm") {
            Isa::I8mm
        } else if dotprod {
            Isa::Dotprod
        } else {
            Isa::Neon
        };
        assert_eq!(Isa::best(), want);
        match std::env::var("QEMU_CPU").as_deref() {
            Ok("max") => assert_eq!(
                Isa::best(),
                Isa::I8mm,
                "qemu -cpu max has the dot product and the int8 matrix multiply"
            ),
            Ok("cortex-a53") => assert_eq!(Isa::best(), Isa::Neon, "a Cortex-A53 has neither"),
            _ => {}
        }
    }

    /// Off ARM the ARM tiers are refused, naming the best tier this CPU has.
    #[cfg(not(target_arch = "aarch64"))]
    #[test]
    fn the_arm_tiers_are_refused_off_arm() {
        let best = Isa::best().name();
        for isa in [Isa::Neon, Isa::Dotprod, Isa::I8mm] {
            assert!(!isa.available());
            match Isa::from_setting(Some(isa.name())) {
                Err(IsaError::Unsupported { best: b, .. }) => assert_eq!(b, best),
                other => panic!("{isa:?} off ARM: {other:?}"),
            }
        }
    }
}
