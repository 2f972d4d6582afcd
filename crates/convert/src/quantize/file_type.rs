//! The file types `quantize` writes: each one's default tensor type and the `general.file_type`
//! number the reference writes for it (`enum llama_ftype`), by which a file's type is named.

use oxibonsai_formats::FormatKind;

/// A file type by the reference's name. The per-tensor rules test for these, as
/// `llama_tensor_get_type` tests `ftype`.
// The reference's spelling (`Q4_K_M`) is the domain's name for these types.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileTypeId {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q1_0,
    Q2_0,
    PQ2_0,
    PTQ1_0,
    TQ1_0,
    TQ2_0,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
}

#[derive(Debug)]
pub struct FileType {
    pub id: FileTypeId,
    /// The name on the command line (`q4_k_m`); `info` prints it upper-cased.
    pub name: &'static str,
    /// The type of every quantizable tensor no rule sends elsewhere.
    pub kind: FormatKind,
    pub llama_ftype: u32,
}

/// Every file type `quantize` accepts. `pq2_0` and `ptq1_0` are ours (no reference ftype exists):
/// each number mirrors the GGUF type id so it can never collide with a reference ftype (all below
/// 100).
/// Q2_K_S is absent: the reference refuses it without an importance matrix.
pub static FILE_TYPES: &[FileType] = &[
    ft(FileTypeId::F32, "f32", FormatKind::F32, 0),
    ft(FileTypeId::F16, "f16", FormatKind::F16, 1),
    ft(FileTypeId::Q4_0, "q4_0", FormatKind::Q4_0, 2),
    ft(FileTypeId::Q4_1, "q4_1", FormatKind::Q4_1, 3),
    ft(FileTypeId::Q8_0, "q8_0", FormatKind::Q8_0, 7),
    ft(FileTypeId::Q5_0, "q5_0", FormatKind::Q5_0, 8),
    ft(FileTypeId::Q5_1, "q5_1", FormatKind::Q5_1, 9),
    ft(FileTypeId::Q2_K, "q2_k", FormatKind::Q2_K, 10),
    ft(FileTypeId::Q3_K_S, "q3_k_s", FormatKind::Q3_K, 11),
    ft(FileTypeId::Q3_K_M, "q3_k_m", FormatKind::Q3_K, 12),
    ft(FileTypeId::Q3_K_L, "q3_k_l", FormatKind::Q3_K, 13),
    ft(FileTypeId::Q4_K_S, "q4_k_s", FormatKind::Q4_K, 14),
    ft(FileTypeId::Q4_K_M, "q4_k_m", FormatKind::Q4_K, 15),
    ft(FileTypeId::Q5_K_S, "q5_k_s", FormatKind::Q5_K, 16),
    ft(FileTypeId::Q5_K_M, "q5_k_m", FormatKind::Q5_K, 17),
    ft(FileTypeId::Q6_K, "q6_k", FormatKind::Q6_K, 18),
    ft(FileTypeId::BF16, "bf16", FormatKind::BF16, 32),
    ft(FileTypeId::TQ1_0, "tq1_0", FormatKind::TQ1_0, 36),
    ft(FileTypeId::TQ2_0, "tq2_0", FormatKind::TQ2_0, 37),
    ft(FileTypeId::Q1_0, "q1_0", FormatKind::Q1_0, 40),
    ft(FileTypeId::Q2_0, "q2_0", FormatKind::Q2_0, 41),
    ft(FileTypeId::PQ2_0, "pq2_0", FormatKind::PQ2_0, 142),
    ft(FileTypeId::PTQ1_0, "ptq1_0", FormatKind::PTQ1_0, 143),
];

const fn ft(id: FileTypeId, name: &'static str, kind: FormatKind, llama_ftype: u32) -> FileType {
    FileType {
        id,
        name,
        kind,
        llama_ftype,
    }
}

pub fn file_type_by_name(name: &str) -> Option<&'static FileType> {
    FILE_TYPES
        .iter()
        .find(|t| t.name.eq_ignore_ascii_case(name))
}

/// The file type a `general.file_type` number stands for, among those this build writes.
pub fn file_type_by_number(llama_ftype: u64) -> Option<&'static FileType> {
    FILE_TYPES
        .iter()
        .find(|t| u64::from(t.llama_ftype) == llama_ftype)
}

#[derive(Debug, thiserror::Error)]
#[error("unknown file type '{name}' (expected one of: {})", names())]
pub struct UnknownFileType {
    pub name: String,
}

impl FileType {
    /// The file type a user named (any case), or an error listing the names.
    pub fn parse(name: &str) -> Result<&'static FileType, UnknownFileType> {
        file_type_by_name(name).ok_or_else(|| UnknownFileType {
            name: name.to_owned(),
        })
    }
}

/// Every accepted name, for error messages and help.
pub fn names() -> String {
    FILE_TYPES
        .iter()
        .map(|t| t.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxibonsai_formats::format;

    #[test]
    fn names_and_numbers_are_unique_and_default_types_exist() {
        for (i, a) in FILE_TYPES.iter().enumerate() {
            for b in &FILE_TYPES[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.llama_ftype, b.llama_ftype);
                assert_ne!(a.id, b.id);
            }
            assert!(std::ptr::eq(file_type_by_name(a.name).unwrap(), a));
            assert!(std::ptr::eq(
                file_type_by_number(a.llama_ftype.into()).unwrap(),
                a
            ));
            // Panics if the registry lacks the default type.
            let _ = format(a.kind);
        }
        assert_eq!(file_type_by_name("Q4_K_M").unwrap().llama_ftype, 15);
        assert!(file_type_by_number(4).is_none(), "retired Q4_1_SOME_F16");
    }
}
