//! A sequence's state as a file (the server's `/slots/{id}?action=save|restore`, llama-server's
//! slot files): its tokens, then each layer's state — a KV cache's rows for the positions held,
//! a recurrent layer's whole state. Restoring it into a sequence of the same model puts the
//! sequence where the saved one was, with nothing computed.
//!
//! Layout (little-endian): `OXBS`, version, token count, the tokens; layer count; per layer a
//! kind byte and its shape (KV: heads, row bytes and type names; recurrent: float counts), then
//! its data: every head's key rows for positions `0..n`, then every head's value rows; or the
//! convolution history and delta-rule matrices as f32. A restore checks each shape against the
//! sequence's own before reading data into it, and reads counts only up to what the sequence
//! holds (never allocating by a count from the file).

use std::io::{Read, Write};

use oxibonsai_formats::format;

use crate::backend::Backend;
use crate::error::EngineError;
use crate::model::Sequence;
use crate::state::LayerState;

const MAGIC: &[u8; 4] = b"OXBS";
const VERSION: u32 = 1;
const KIND_KV: u8 = 0;
const KIND_RECURRENT: u8 = 1;
/// The longest cache type name written.
const MAX_NAME: usize = 32;

fn bad(reason: impl Into<String>) -> EngineError {
    EngineError::StateFile(reason.into())
}

fn io(e: std::io::Error) -> EngineError {
    bad(format!("{e}"))
}

fn put_u32(w: &mut impl Write, v: usize) -> Result<(), EngineError> {
    let v = u32::try_from(v).map_err(|_| bad(format!("{v} does not fit the file's 32 bits")))?;
    w.write_all(&v.to_le_bytes()).map_err(io)
}

fn get_u32(r: &mut impl Read, what: &str) -> Result<usize, EngineError> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)
        .map_err(|e| bad(format!("reading {what}: {e}")))?;
    Ok(u32::from_le_bytes(b) as usize)
}

fn put_name(w: &mut impl Write, name: &str) -> Result<(), EngineError> {
    put_u32(w, name.len())?;
    w.write_all(name.as_bytes()).map_err(io)
}

fn get_name(r: &mut impl Read, what: &str) -> Result<String, EngineError> {
    let n = get_u32(r, what)?;
    if n > MAX_NAME {
        return Err(bad(format!("{what}: a name of {n} bytes")));
    }
    let mut b = vec![0u8; n];
    r.read_exact(&mut b)
        .map_err(|e| bad(format!("reading {what}: {e}")))?;
    String::from_utf8(b).map_err(|_| bad(format!("{what} is not UTF-8")))
}

/// Checks that the file's value for `what` is this sequence's.
fn expect(what: &str, found: usize, here: usize) -> Result<(), EngineError> {
    if found != here {
        return Err(bad(format!(
            "{what}: the file has {found}, this model has {here}"
        )));
    }
    Ok(())
}

impl<B: Backend> Sequence<B> {
    /// Writes the sequence's tokens and state; returns the bytes written.
    pub fn save_state(&self, w: &mut impl Write) -> Result<usize, EngineError> {
        let mut w = Counting { inner: w, n: 0 };
        let n = self.n_past();
        w.write_all(MAGIC).map_err(io)?;
        put_u32(&mut w, VERSION as usize)?;
        put_u32(&mut w, n)?;
        for &t in &self.tokens {
            put_u32(&mut w, t as usize)?;
        }
        put_u32(&mut w, self.layers.len())?;
        for layer in &self.layers {
            match layer {
                LayerState::Kv(c) => {
                    w.write_all(&[KIND_KV]).map_err(io)?;
                    for v in [c.n_head_kv, c.k_row, c.v_row] {
                        put_u32(&mut w, v)?;
                    }
                    put_name(&mut w, format(c.types.k).name)?;
                    put_name(&mut w, format(c.types.v).name)?;
                    for g in 0..c.n_head_kv {
                        w.write_all(&c.key_bytes(g)[..n * c.k_row]).map_err(io)?;
                    }
                    for g in 0..c.n_head_kv {
                        w.write_all(&c.value_bytes(g)[..n * c.v_row]).map_err(io)?;
                    }
                }
                LayerState::Recurrent(s) => {
                    w.write_all(&[KIND_RECURRENT]).map_err(io)?;
                    put_u32(&mut w, s.conv.len())?;
                    put_u32(&mut w, s.ssm.len())?;
                    for x in s.conv.iter().chain(&s.ssm) {
                        w.write_all(&x.to_le_bytes()).map_err(io)?;
                    }
                }
            }
        }
        w.flush().map_err(io)?;
        Ok(w.n)
    }

    /// Replaces the sequence's state with a saved one of the same model's shape; returns the
    /// tokens restored and the bytes read. On an error the sequence is left empty.
    pub fn load_state(&mut self, r: &mut impl Read) -> Result<(usize, usize), EngineError> {
        self.clear();
        let mut r = Counting { inner: r, n: 0 };
        let result = self.read_state(&mut r);
        if result.is_err() {
            self.clear();
        }
        result.map(|n| (n, r.n))
    }

    fn read_state(&mut self, r: &mut impl Read) -> Result<usize, EngineError> {
        let mut magic = [0u8; 4];
        r.read_exact(&mut magic)
            .map_err(|e| bad(format!("reading the header: {e}")))?;
        if &magic != MAGIC {
            return Err(bad("not a sequence state file (no OXBS header)"));
        }
        expect(
            "the file version",
            get_u32(r, "the version")?,
            VERSION as usize,
        )?;
        let n = get_u32(r, "the token count")?;
        if n > self.n_ctx {
            return Err(bad(format!(
                "the file holds {n} positions, this sequence at most {}",
                self.n_ctx
            )));
        }
        let mut tokens = Vec::with_capacity(n);
        for _ in 0..n {
            tokens.push(get_u32(r, "a token")? as u32);
        }
        expect("layers", get_u32(r, "the layer count")?, self.layers.len())?;
        for (i, layer) in self.layers.iter_mut().enumerate() {
            let mut kind = [0u8; 1];
            r.read_exact(&mut kind)
                .map_err(|e| bad(format!("reading layer {i}: {e}")))?;
            match (kind[0], layer) {
                (KIND_KV, LayerState::Kv(c)) => {
                    expect(
                        &format!("layer {i} KV heads"),
                        get_u32(r, "KV heads")?,
                        c.n_head_kv,
                    )?;
                    expect(
                        &format!("layer {i} key row bytes"),
                        get_u32(r, "key row")?,
                        c.k_row,
                    )?;
                    expect(
                        &format!("layer {i} value row bytes"),
                        get_u32(r, "value row")?,
                        c.v_row,
                    )?;
                    for (what, here) in [("key", c.types.k), ("value", c.types.v)] {
                        let name = get_name(r, "a cache type")?;
                        if name != format(here).name {
                            return Err(bad(format!(
                                "layer {i} {what} cache type: the file has {name}, this server {}",
                                format(here).name
                            )));
                        }
                    }
                    for g in 0..c.n_head_kv {
                        for pos in 0..n {
                            r.read_exact(c.key_row_mut(g, pos))
                                .map_err(|e| bad(format!("reading layer {i} keys: {e}")))?;
                        }
                    }
                    for g in 0..c.n_head_kv {
                        for pos in 0..n {
                            r.read_exact(c.value_row_mut(g, pos))
                                .map_err(|e| bad(format!("reading layer {i} values: {e}")))?;
                        }
                    }
                }
                (KIND_RECURRENT, LayerState::Recurrent(s)) => {
                    expect(
                        &format!("layer {i} conv floats"),
                        get_u32(r, "conv")?,
                        s.conv.len(),
                    )?;
                    expect(
                        &format!("layer {i} ssm floats"),
                        get_u32(r, "ssm")?,
                        s.ssm.len(),
                    )?;
                    for x in s.conv.iter_mut().chain(s.ssm.iter_mut()) {
                        let mut b = [0u8; 4];
                        r.read_exact(&mut b)
                            .map_err(|e| bad(format!("reading layer {i} state: {e}")))?;
                        *x = f32::from_le_bytes(b);
                    }
                }
                (k, _) => {
                    return Err(bad(format!(
                        "layer {i}: the file's layer kind {k} is not this model's"
                    )))
                }
            }
        }
        let mut rest = [0u8; 1];
        if r.read(&mut rest).map_err(io)? != 0 {
            return Err(bad("bytes after the last layer"));
        }
        self.tokens = tokens;
        // The file holds no hidden states: a sequence that keeps them does so from here on.
        self.restart_hidden();
        // A recurrent state is only good at its own position: saved as a checkpoint there.
        self.checkpoint();
        Ok(n)
    }
}

/// Counts the bytes passing through.
struct Counting<T> {
    inner: T,
    n: usize,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n;
        Ok(n)
    }
}
