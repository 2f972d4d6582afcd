//! The keys only qwen35 (Qwen3.5 / 3.6 hybrid: Gated DeltaNet + gated attention) has, read and
//! checked as llama.cpp's `llama_model_qwen35::load_arch_hparams` reads them.

use oxibonsai_gguf::{Array, Metadata, Value};

use super::{LayerKind, SsmConfig};
use crate::error::EngineError;

/// What qwen35 adds to the common hyper-parameters.
pub(super) struct Qwen35Keys {
    /// Trunk layers: `block_count − nextn_predict_layers` (the multi-token-prediction layers
    /// are a draft head, never run by the trunk).
    pub n_layer: usize,
    /// `nextn_predict_layers`: the multi-token-prediction layers after the trunk.
    pub n_nextn: usize,
    pub layers: Vec<LayerKind>,
    pub ssm: SsmConfig,
    pub rope_sections: [u32; 4],
}

fn bad(key: &str, reason: String) -> EngineError {
    EngineError::BadHyperParameter {
        key: key.to_owned(),
        reason,
    }
}

/// A BOOL / INT32 / UINT32 array of exactly `n` entries, or a scalar copied into all `n`
/// (llama.cpp's `get_key_or_arr`); `None` when the key is absent.
fn key_or_array(meta: &Metadata, key: &str, n: usize) -> Result<Option<Vec<i64>>, EngineError> {
    let Some(value) = meta.get(key) else {
        return Ok(None);
    };
    let values: Vec<i64> = match value {
        Value::Bool(b) => vec![i64::from(*b); n],
        Value::I32(v) => vec![i64::from(*v); n],
        Value::U32(v) => vec![i64::from(*v); n],
        Value::Array(Array::Bool(a)) => a.iter().map(|&b| i64::from(b)).collect(),
        Value::Array(Array::I32(a)) => a.iter().map(|&v| i64::from(v)).collect(),
        Value::Array(Array::U32(a)) => a.iter().map(|&v| i64::from(v)).collect(),
        other => {
            return Err(bad(
                key,
                format!("{other:?} is not a bool / int32 / uint32 scalar or array"),
            ))
        }
    };
    if values.len() != n {
        return Err(bad(
            key,
            format!("an array of {} entries where {n} are needed", values.len()),
        ));
    }
    Ok(Some(values))
}

/// Reads and checks the qwen35 keys. `block_count` is the file's (MTP layers included),
/// `required` / `optional` read a positive size under `qwen35.`.
pub(super) fn read(
    meta: &Metadata,
    block_count: usize,
    head_dim: usize,
    head_dim_v: usize,
    required: &dyn Fn(&str) -> Result<usize, EngineError>,
    optional: &dyn Fn(&str) -> Result<Option<usize>, EngineError>,
) -> Result<Qwen35Keys, EngineError> {
    let key = |suffix: &str| format!("qwen35.{suffix}");
    let nextn = match meta.opt_u64(&key("nextn_predict_layers"))? {
        Some(n) => n as usize,
        None => 0,
    };
    if nextn >= block_count {
        return Err(bad(
            &key("nextn_predict_layers"),
            format!("{nextn} prediction layers leave no trunk of the {block_count} blocks"),
        ));
    }
    let n_layer = block_count - nextn;
    if head_dim != head_dim_v {
        return Err(bad(
            &key("attention.value_length"),
            format!("{head_dim_v} differs from attention.key_length {head_dim} (qwen35 needs them equal)"),
        ));
    }
    // Required by llama.cpp (no default), though the common reader has one.
    meta.get_f32(&key("attention.layer_norm_rms_epsilon"))?;

    let sections_key = key("rope.dimension_sections");
    let sections = key_or_array(meta, &sections_key, 4)?
        .ok_or_else(|| bad(&sections_key, "missing (qwen35 requires it)".to_owned()))?;
    let mut rope_sections = [0u32; 4];
    for (dst, &v) in rope_sections.iter_mut().zip(&sections) {
        *dst = u32::try_from(v)
            .ok()
            .filter(|&v| v <= 1 << 16)
            .ok_or_else(|| bad(&sections_key, format!("section {v} is out of range")))?;
    }
    if rope_sections.iter().sum::<u32>() == 0 {
        return Err(bad(&sections_key, "every section is 0".to_owned()));
    }
    let ssm = SsmConfig {
        d_conv: required("ssm.conv_kernel")?,
        d_state: required("ssm.state_size")?,
        n_group: required("ssm.group_count")?,
        n_v_head: required("ssm.time_step_rank")?,
    };
    let inner = required("ssm.inner_size")?;
    if ssm.d_state * ssm.n_v_head != inner {
        return Err(bad(
            &key("ssm.inner_size"),
            format!(
                "{inner} is not state_size {} × time_step_rank {}",
                ssm.d_state, ssm.n_v_head
            ),
        ));
    }
    if !ssm.n_v_head.is_multiple_of(ssm.n_group) {
        return Err(bad(
            &key("ssm.time_step_rank"),
            format!(
                "{} value heads are not a multiple of group_count {}",
                ssm.n_v_head, ssm.n_group
            ),
        ));
    }
    if !(2..=super::MAX_CONV_KERNEL).contains(&ssm.d_conv) {
        return Err(bad(
            &key("ssm.conv_kernel"),
            format!(
                "{} is outside 2..={} (the convolution keeps d_conv − 1 inputs)",
                ssm.d_conv,
                super::MAX_CONV_KERNEL
            ),
        ));
    }

    // The per-layer array, taken as-is when present; else every `interval`-th layer attends.
    let layers = match key_or_array(meta, &key("attention.recurrent_layers"), block_count)? {
        Some(flags) => flags[..n_layer]
            .iter()
            .map(|&f| {
                if f != 0 {
                    LayerKind::GatedDeltaNet
                } else {
                    LayerKind::Attention
                }
            })
            .collect(),
        None => {
            let interval = optional("full_attention_interval")?.unwrap_or(4);
            (0..n_layer)
                .map(|i| {
                    if (i + 1) % interval != 0 {
                        LayerKind::GatedDeltaNet
                    } else {
                        LayerKind::Attention
                    }
                })
                .collect()
        }
    };
    Ok(Qwen35Keys {
        n_layer,
        n_nextn: nextn,
        layers,
        ssm,
        rope_sections,
    })
}
