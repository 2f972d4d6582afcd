//! An opened, fully validated GGUF file: the parsed header plus the bytes (mmap or owned), from
//! which tensor data is handed out as zero-copy slices.

use std::path::Path;

use crate::error::GgufError;
use crate::header;
use crate::metadata::Metadata;
use crate::tensor::{self, TensorInfo};
use crate::value::Value;

/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
pub const ALIGNMENT_KEY: &str = "general.alignment";

enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(map) => map,
            Storage::Owned(bytes) => bytes,
        }
    }
}

/// A GGUF file whose header, metadata and tensor layout passed every check.
pub struct GgufFile {
    storage: Storage,
    parsed: Parsed,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.parsed.version)
            .field("alignment", &self.parsed.alignment)
            .field("metadata_len", &self.parsed.metadata.len())
            .field("tensors", &self.parsed.tensors.len())
            .field("data_offset", &self.parsed.data_offset)
            .field("file_size", &self.file_size())
            .finish()
    }
}

/// What parsing and validation produced: the file's parts, or every problem found.
struct Parsed {
    version: u32,
    alignment: u64,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    /// Indices into `tensors` sorted by name.
    by_name: Vec<usize>,
    data_offset: u64,
}

fn parse(bytes: &[u8]) -> Result<Parsed, Vec<GgufError>> {
    let (header, mut errors) = header::parse(bytes).map_err(|e| vec![e])?;
    let alignment = alignment_of(header.metadata.get(ALIGNMENT_KEY)).map_err(|e| vec![e])?;
    // Past the end of the file (or beyond u64) the data section is simply empty.
    let data_offset = header
        .end
        .checked_next_multiple_of(alignment)
        .unwrap_or(u64::MAX);
    let data_size = (bytes.len() as u64).saturating_sub(data_offset);
    match tensor::resolve(header.tensors, alignment, data_size) {
        Ok((tensors, by_name)) if errors.is_empty() => Ok(Parsed {
            version: header.version,
            alignment,
            metadata: header.metadata,
            tensors,
            by_name,
            data_offset,
        }),
        Ok(_) => Err(errors),
        Err(mut tensor_errors) => {
            errors.append(&mut tensor_errors);
            Err(errors)
        }
    }
}

/// `general.alignment`: u32 in practice; any integer type holding a non-zero power of two is taken.
pub(crate) fn alignment_of(value: Option<&Value>) -> Result<u64, GgufError> {
    let Some(value) = value else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let found = value.as_integer().ok_or_else(|| GgufError::WrongType {
        key: ALIGNMENT_KEY.to_owned(),
        expected: "u32",
        found: value.type_name(),
    })?;
    match u64::try_from(found) {
        Ok(a) if a.is_power_of_two() => Ok(a),
        // A negative alignment is reported as 0: as wrong as any non-power of two.
        _ => Err(GgufError::BadAlignment {
            found: u64::try_from(found).unwrap_or(0),
        }),
    }
}

/// Every problem of a GGUF image: a structural error that stops parsing ends the list; duplicate
/// keys and every tensor's problems are all collected. Empty when the file is valid.
pub fn validate_bytes(bytes: &[u8]) -> Vec<GgufError> {
    match parse(bytes) {
        Ok(_) => Vec::new(),
        Err(errors) => errors,
    }
}

/// [`validate_bytes`] over a file (mapped, not read). `Err` only when the file cannot be opened.
pub fn validate_file(path: impl AsRef<Path>) -> Result<Vec<GgufError>, std::io::Error> {
    let storage = map(path.as_ref())?;
    Ok(validate_bytes(storage.bytes()))
}

fn map(path: &Path) -> Result<Storage, std::io::Error> {
    let file = std::fs::File::open(path)?;
    if file.metadata()?.len() == 0 {
        // Mapping zero bytes is an error on some systems; an empty file is simply truncated.
        return Ok(Storage::Owned(Vec::new()));
    }
    // SAFETY: the map is read-only and private to this process, but another process could still
    // truncate or rewrite the file while it is mapped: truncation makes reads fault (SIGBUS) and a
    // rewrite changes tensor bytes under `&[u8]` slices. Like every mmap-based model loader we accept
    // that: model files are treated as immutable while in use. The header is parsed once at open,
    // so a later rewrite can corrupt weights but never the offsets and sizes we validated.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    Ok(Storage::Mmap(map))
}

impl GgufFile {
    /// Maps the file and validates all of it; the error is the first problem found.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let storage = map(path).map_err(|error| GgufError::Io {
            path: path.to_owned(),
            error,
        })?;
        GgufFile::from_storage(storage)
    }

    /// The same over an owned buffer (tests, writer round trips, files fetched into memory).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        GgufFile::from_storage(Storage::Owned(bytes))
    }

    fn from_storage(storage: Storage) -> Result<GgufFile, GgufError> {
        let parsed = parse(storage.bytes()).map_err(|errors| {
            errors
                .into_iter()
                .next()
                .expect("a failed parse reports at least one error")
        })?;
        Ok(GgufFile { storage, parsed })
    }

    pub fn version(&self) -> u32 {
        self.parsed.version
    }

    pub fn alignment(&self) -> u64 {
        self.parsed.alignment
    }

    pub fn metadata(&self) -> &Metadata {
        &self.parsed.metadata
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.parsed.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.parsed
            .by_name
            .binary_search_by(|&i| self.parsed.tensors[i].name.as_str().cmp(name))
            .ok()
            .map(|found| &self.parsed.tensors[self.parsed.by_name[found]])
    }

    /// The tensor's data: a view into the file, exactly `n_bytes` long. `tensor` must come from
    /// this file (validation proved every such range lies inside it).
    pub fn tensor_data(&self, tensor: &TensorInfo) -> &[u8] {
        let start = (self.parsed.data_offset + tensor.offset) as usize;
        let end = start + tensor.n_bytes as usize;
        self.storage
            .bytes()
            .get(start..end)
            .unwrap_or_else(|| panic!("tensor '{}' does not belong to this file", tensor.name))
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> u64 {
        self.parsed.data_offset
    }

    pub fn file_size(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    /// The whole file image.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Tells the OS that the tensor's bytes will not be read again soon (a backend copied them
    /// into a layout of its own): their pages of the mapping may leave memory. A later read of
    /// `tensor_data` still sees the same bytes, faulted back in from the file. Nothing to do for
    /// an owned buffer or off Unix.
    pub fn release_tensor_data(&self, tensor: &TensorInfo) -> std::io::Result<()> {
        let start = (self.parsed.data_offset + tensor.offset) as usize;
        let len = tensor.n_bytes as usize;
        match &self.storage {
            #[cfg(unix)]
            Storage::Mmap(map) if len > 0 => {
                if start.checked_add(len).is_none_or(|end| end > map.len()) {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("tensor '{}' does not belong to this file", tensor.name),
                    ));
                }
                // SAFETY: MADV_DONTNEED on a read-only private file mapping that is never
                // written only drops clean page-cache pages: a later access re-reads them from
                // the file, so every `&[u8]` handed out keeps seeing the same bytes (the file
                // being immutable while mapped, as `map` already assumes). The range lies
                // inside the map (checked above); memmap2 widens it to whole pages, which at
                // worst drops neighbouring bytes that fault back in the same way.
                unsafe {
                    map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len)
                }
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufWriter;

    #[test]
    fn released_tensor_data_reads_back_the_same_bytes() {
        let q8 = oxibonsai_formats::format(oxibonsai_formats::FormatKind::Q8_0);
        // Several pages of distinct bytes, so a dropped page that came back as zeros shows.
        let bytes: Vec<u8> = (0..34 * 512u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut writer = GgufWriter::new();
        writer
            .add_tensor("w", &[32, 512], q8, bytes.clone())
            .expect("a valid tensor");
        writer
            .add_tensor("next", &[32, 1], q8, vec![9u8; 34])
            .expect("a valid tensor");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("release.gguf");
        writer.write_file(&path).expect("written");
        let file = GgufFile::open(&path).expect("opens");
        assert!(matches!(file.storage, Storage::Mmap(_)));
        let (w, next) = (
            file.tensor("w").expect("w").clone(),
            file.tensor("next").expect("next").clone(),
        );
        assert_eq!(file.tensor_data(&w), &bytes[..]);
        file.release_tensor_data(&w)
            .expect("madvise accepts the range");
        assert_eq!(file.tensor_data(&w), &bytes[..]);
        assert_eq!(file.tensor_data(&next), &[9u8; 34][..]);
        let owned = GgufFile::from_bytes(writer.to_bytes().expect("bytes")).expect("parses");
        owned
            .release_tensor_data(&w)
            .expect("nothing to do for owned bytes");
        assert_eq!(owned.tensor_data(&w), &bytes[..]);
    }
}
