//! Checked row-level entry points over the registry's raw block functions: every length is
//! validated and a mismatch is a [`FormatError`] naming the format and what was expected, so data
//! from outside (a tensor view, a user's buffer) never reaches a panic.

use crate::registry::{format, Format};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{format}: {elems} values are not a whole number of {block_elems}-value blocks")]
    NotWholeBlocks {
        format: &'static str,
        elems: usize,
        block_elems: usize,
    },
    #[error("{format}: {bytes} bytes are not a whole number of {block_bytes}-byte blocks")]
    NotWholeBlockBytes {
        format: &'static str,
        bytes: usize,
        block_bytes: usize,
    },
    #[error("{format}: {what} has length {found}, expected {expected}")]
    LengthMismatch {
        format: &'static str,
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("{format} is never an activation format: it has no activation quantizer")]
    NotAnActivationFormat { format: &'static str },
}

impl Format {
    /// The row of the activation format this one is dotted with.
    pub fn partner_format(&self) -> &'static Format {
        format(self.partner)
    }

    /// Blocks holding `elems` values, or an error when that is not a whole number of blocks.
    pub fn blocks_for_elems(&self, elems: usize) -> Result<usize, FormatError> {
        if !elems.is_multiple_of(self.block_elems) {
            return Err(FormatError::NotWholeBlocks {
                format: self.name,
                elems,
                block_elems: self.block_elems,
            });
        }
        Ok(elems / self.block_elems)
    }

    /// Blocks in `bytes` bytes of this format, or an error when that is not a whole number.
    pub fn blocks_for_bytes(&self, bytes: usize) -> Result<usize, FormatError> {
        if !bytes.is_multiple_of(self.block_bytes) {
            return Err(FormatError::NotWholeBlockBytes {
                format: self.name,
                bytes,
                block_bytes: self.block_bytes,
            });
        }
        Ok(bytes / self.block_bytes)
    }

    fn expect_len(
        &self,
        what: &'static str,
        expected: usize,
        found: usize,
    ) -> Result<(), FormatError> {
        if expected != found {
            return Err(FormatError::LengthMismatch {
                format: self.name,
                what,
                expected,
                found,
            });
        }
        Ok(())
    }

    /// Quantizes `src` (a whole number of blocks) with the reference quantizer into `dst`.
    pub fn quantize_row_into(&self, src: &[f32], dst: &mut [u8]) -> Result<(), FormatError> {
        let n_blocks = self.blocks_for_elems(src.len())?;
        self.expect_len("quantized output", n_blocks * self.block_bytes, dst.len())?;
        (self.quantize)(src, dst);
        Ok(())
    }

    /// Quantizes `src` (a whole number of blocks) with the reference quantizer.
    pub fn quantize_row(&self, src: &[f32]) -> Result<Vec<u8>, FormatError> {
        let n_blocks = self.blocks_for_elems(src.len())?;
        let mut dst = vec![0u8; n_blocks * self.block_bytes];
        (self.quantize)(src, &mut dst);
        Ok(dst)
    }

    /// Dequantizes whole blocks into `dst`, which must hold exactly their values.
    pub fn dequantize_row_into(&self, src: &[u8], dst: &mut [f32]) -> Result<(), FormatError> {
        let n_blocks = self.blocks_for_bytes(src.len())?;
        self.expect_len("dequantized output", n_blocks * self.block_elems, dst.len())?;
        (self.dequantize)(src, dst);
        Ok(())
    }

    /// Dequantizes whole blocks.
    pub fn dequantize_row(&self, src: &[u8]) -> Result<Vec<f32>, FormatError> {
        let n_blocks = self.blocks_for_bytes(src.len())?;
        let mut dst = vec![0f32; n_blocks * self.block_elems];
        (self.dequantize)(src, &mut dst);
        Ok(dst)
    }

    /// Converts activations into this format as the CPU backend does, into `dst` (a reusable
    /// scratch buffer). Call it on the partner: `weights.partner_format().quantize_activation_into(…)`.
    pub fn quantize_activation_into(&self, src: &[f32], dst: &mut [u8]) -> Result<(), FormatError> {
        let quantize = self
            .quantize_activation
            .ok_or(FormatError::NotAnActivationFormat { format: self.name })?;
        let n_blocks = self.blocks_for_elems(src.len())?;
        self.expect_len(
            "quantized activation",
            n_blocks * self.block_bytes,
            dst.len(),
        )?;
        quantize(src, dst);
        Ok(())
    }

    /// Converts activations into this format as the CPU backend does.
    pub fn quantize_activation_row(&self, src: &[f32]) -> Result<Vec<u8>, FormatError> {
        let n_blocks = self.blocks_for_elems(src.len())?;
        let mut dst = vec![0u8; n_blocks * self.block_bytes];
        self.quantize_activation_into(src, &mut dst)?;
        Ok(dst)
    }

    /// Dot product of `weights` (whole blocks of this format) with `activation` (the same number
    /// of values in the partner format).
    pub fn dot_row(&self, weights: &[u8], activation: &[u8]) -> Result<f32, FormatError> {
        let elems = self.blocks_for_bytes(weights.len())? * self.block_elems;
        let partner = self.partner_format();
        let partner_blocks = partner.blocks_for_elems(elems)?;
        self.expect_len(
            "partner activation bytes",
            partner_blocks * partner.block_bytes,
            activation.len(),
        )?;
        Ok((self.dot)(weights, activation))
    }
}
