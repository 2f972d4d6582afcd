//! The instruction-set tiers: which ones this CPU runs, and the one `OXIBONSAI_ISA` forces.

/// Instruction-set tiers, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL/DQ (+ VNNI where the CPU has it, chosen inside the kernels).
    Avx512,
}

#[derive(Debug, thiserror::Error)]
pub enum IsaError {
    #[error("OXIBONSAI_ISA='{value}' is not a tier: use scalar, avx2 or avx512")]
    Unknown { value: String },
    #[error("OXIBONSAI_ISA={isa} but this CPU lacks it (best available: {best})")]
    Unsupported {
        isa: &'static str,
        best: &'static str,
    },
}

impl Isa {
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
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
            #[cfg(not(target_arch = "x86_64"))]
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

    /// Off x86 no vector tier is built yet: detection must say scalar, and refuse the x86 tiers.
    #[cfg(not(target_arch = "x86_64"))]
    #[test]
    fn only_the_scalar_tier_off_x86() {
        assert_eq!(Isa::best(), Isa::Scalar);
        for isa in [Isa::Avx2, Isa::Avx512] {
            assert!(!isa.available());
            assert!(matches!(
                Isa::from_setting(Some(isa.name())),
                Err(IsaError::Unsupported { best: "scalar", .. })
            ));
        }
    }
}
