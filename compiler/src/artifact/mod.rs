//! Artifact writers: turn the relocatable ELF object produced by the Cranelift
//! back end into the files a user links against.
//!
//! * [`link_shared_object`] — a self-contained `ET_DYN` shared library. nnc is its
//!   own (tiny) static linker here, so no C toolchain is needed at compile time.
//! * [`write_static_archive`] — a GNU `ar` archive with a symbol index.
//! * [`write_atomically`] — how every artifact reaches the disk, so that a failed
//!   compile never leaves a truncated file behind.

pub mod archive;
pub mod atomic_write;
pub mod shared_object;

mod elf_input;
mod link_plan;
mod reloc;

pub use archive::write_static_archive;
pub use atomic_write::{
    write_atomically, write_atomically_together, write_atomically_with_mode, FileToWrite,
};
pub use shared_object::link_shared_object;

/// Everything that can go wrong while turning an object file into an artifact.
///
/// Each variant names the offending item (symbol, section, relocation) because
/// these errors usually point at a code generator bug, and the name is what
/// one needs to find it.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The input is not a well-formed object file of a kind we accept.
    #[error("invalid input object: {0}")]
    InvalidObject(String),

    /// The object targets an architecture we cannot link for.
    #[error("unsupported ELF machine {0} (only x86-64 and aarch64 are supported)")]
    UnsupportedMachine(u16),

    /// A section kind that the shared-object linker does not know how to place.
    #[error("unsupported section `{section}`: {reason}")]
    UnsupportedSection { section: String, reason: String },

    /// A symbol is referenced or declared but not defined in the object. Model
    /// code must be self-contained (no libc, no other libraries).
    #[error("undefined symbol `{0}`: the model object must not reference external symbols")]
    UndefinedSymbol(String),

    /// A symbol kind that cannot be represented in the output.
    #[error("unsupported symbol `{symbol}`: {reason}")]
    UnsupportedSymbol { symbol: String, reason: String },

    /// A relocation type this linker does not implement.
    #[error("unsupported relocation {kind} in section `{section}` at offset {offset:#x}")]
    UnsupportedRelocation {
        kind: String,
        section: String,
        offset: u64,
    },

    /// A relocation whose computed value does not fit its field, or violates
    /// the alignment its instruction encoding requires.
    #[error(
        "relocation {kind} against `{symbol}` in section `{section}` at offset {offset:#x} \
         cannot encode value {value:#x}: {reason}"
    )]
    RelocationOutOfRange {
        kind: String,
        symbol: String,
        section: String,
        offset: u64,
        value: i64,
        reason: &'static str,
    },

    /// An absolute relocation in a section that cannot take a dynamic
    /// relocation (e.g. code): the code was not generated position-independent.
    #[error(
        "absolute relocation {kind} against `{symbol}` in non-writable section `{section}` \
         at offset {offset:#x}: code must be position-independent (declare the symbol colocated)"
    )]
    TextRelocation {
        kind: String,
        symbol: String,
        section: String,
        offset: u64,
    },

    /// A caller-supplied argument (soname, member name, …) is unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The output would exceed a limit of the file format.
    #[error("output too large: {0}")]
    TooLarge(String),

    /// The low-level ELF writer rejected the layout (a bug in this module).
    #[error("ELF writer error: {0}")]
    Write(String),

    /// I/O error while persisting an artifact.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<object::read::Error> for ArtifactError {
    fn from(err: object::read::Error) -> Self {
        ArtifactError::InvalidObject(err.to_string())
    }
}

impl From<object::write::Error> for ArtifactError {
    fn from(err: object::write::Error) -> Self {
        ArtifactError::Write(err.to_string())
    }
}
