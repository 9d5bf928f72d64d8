//! GNU-format `ar` archives (`.a`) holding a single object file.
//!
//! The format is small enough to write by hand, which gives us the symbol
//! index (armap) that GNU ld, lld and rustc need to pull the member in:
//!
//! ```text
//! "!<arch>\n"
//! "/"  member: u32 BE count, count × u32 BE member-header offsets, NUL-terminated names
//! "//" member: long member names, "name/\n" (only if the name is > 15 bytes)
//! the object member
//! ```
//!
//! Every member's data is padded to an even size with `\n`. Headers are
//! deterministic (zero timestamp, uid and gid; mode 0644) so builds are
//! reproducible. If member offsets would not fit in 32 bits the 64-bit index
//! `/SYM64/` is used instead, which GNU ld and lld also understand.

use object::{Object, ObjectSymbol};

use super::ArtifactError;

const MAGIC: &[u8] = b"!<arch>\n";
const HEADER_SIZE: u64 = 60;
/// Longest name that fits the 16-byte name field together with its '/' terminator.
const MAX_SHORT_NAME: usize = 15;
/// The header's size field holds at most ten decimal digits.
const MAX_MEMBER_SIZE: u64 = 9_999_999_999;

/// Builds an archive containing `object` as member `member_name`, with an
/// index of the object's global defined symbols.
///
/// `member_name` must be a plain file name (no '/', no NUL, not empty).
/// `object` must be an object file the `object` crate can read; this is
/// checked because an archive whose index disagrees with its member would
/// make linkers fail in confusing ways later.
pub fn write_static_archive(member_name: &str, object: &[u8]) -> Result<Vec<u8>, ArtifactError> {
    check_member_name(member_name)?;
    let symbols = global_defined_symbols(object)?;
    let member_size = padded(object.len() as u64);
    if object.len() as u64 > MAX_MEMBER_SIZE {
        return Err(ArtifactError::TooLarge(format!(
            "archive member of {} bytes exceeds the ar size field",
            object.len()
        )));
    }

    let long_names = (member_name.len() > MAX_SHORT_NAME).then(|| format!("{member_name}/\n"));
    let long_names_size = long_names
        .as_ref()
        .map_or(0, |names| HEADER_SIZE + padded(names.len() as u64));
    let names_size: u64 = symbols.iter().map(|s| s.len() as u64 + 1).sum();

    // The member's offset depends on the index size, which depends on the
    // width of the offsets stored in it: try 32 bits first.
    let index32_size = HEADER_SIZE + padded(4 + 4 * symbols.len() as u64 + names_size);
    let member_offset32 = MAGIC.len() as u64 + index32_size + long_names_size;
    let wide = member_offset32 > u64::from(u32::MAX);
    let (index_name, word, index_size) = if wide {
        (
            "/SYM64/",
            8,
            HEADER_SIZE + padded(8 + 8 * symbols.len() as u64 + names_size),
        )
    } else {
        ("/", 4, index32_size)
    };
    let member_offset = MAGIC.len() as u64 + index_size + long_names_size;

    let total = member_offset + HEADER_SIZE + member_size;
    let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    out.extend_from_slice(MAGIC);
    write_index(&mut out, index_name, word, &symbols, member_offset);
    let member_header_name = match &long_names {
        Some(names) => {
            write_member(&mut out, "//", names.as_bytes());
            "/0".to_owned()
        }
        None => format!("{member_name}/"),
    };
    write_member(&mut out, &member_header_name, object);
    debug_assert_eq!(out.len() as u64, total);
    Ok(out)
}

fn check_member_name(name: &str) -> Result<(), ArtifactError> {
    if name.is_empty() || name.contains(['/', '\0', '\n']) {
        return Err(ArtifactError::InvalidArgument(format!(
            "archive member name {name:?} must be a non-empty file name without '/', NUL or newline"
        )));
    }
    Ok(())
}

/// Names of the symbols a linker may resolve from this object: global (or
/// weak) and defined. Hidden symbols are included, as `ar` does — visibility
/// only matters once the member has been linked into a module.
fn global_defined_symbols(object: &[u8]) -> Result<Vec<Vec<u8>>, ArtifactError> {
    let file = object::File::parse(object)?;
    let mut names = Vec::new();
    for symbol in file.symbols() {
        if symbol.is_global() && (symbol.is_definition() || symbol.is_common()) {
            let name = symbol.name_bytes()?;
            if !name.is_empty() {
                names.push(name.to_vec());
            }
        }
    }
    Ok(names)
}

fn padded(size: u64) -> u64 {
    size + (size & 1)
}

fn write_index(out: &mut Vec<u8>, name: &str, word: usize, symbols: &[Vec<u8>], member: u64) {
    let mut body = Vec::new();
    let push_word = |body: &mut Vec<u8>, value: u64| {
        let bytes = value.to_be_bytes();
        body.extend_from_slice(&bytes[8 - word..]);
    };
    push_word(&mut body, symbols.len() as u64);
    for _ in symbols {
        push_word(&mut body, member);
    }
    for symbol in symbols {
        body.extend_from_slice(symbol);
        body.push(0);
    }
    write_member(out, name, &body);
}

fn write_member(out: &mut Vec<u8>, name: &str, data: &[u8]) {
    let header = format!(
        "{name:<16}{mtime:<12}{uid:<6}{gid:<6}{mode:<8}{size:<10}`\n",
        mtime = 0,
        uid = 0,
        gid = 0,
        mode = 644,
        size = data.len()
    );
    debug_assert_eq!(header.len() as u64, HEADER_SIZE);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    if data.len() % 2 == 1 {
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_object() -> Vec<u8> {
        use object::write::{Object, Symbol, SymbolSection};
        use object::{Architecture, BinaryFormat, Endianness, SymbolFlags};
        use object::{SymbolKind, SymbolScope};
        let mut obj = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
        let text = obj.section_id(object::write::StandardSection::Text);
        let offset = obj.append_section_data(text, &[0xc3], 16);
        for (name, scope) in [
            (
                &b"a_rather_long_exported_function"[..],
                SymbolScope::Dynamic,
            ),
            (&b"local_helper"[..], SymbolScope::Compilation),
        ] {
            obj.add_symbol(Symbol {
                name: name.to_vec(),
                value: offset,
                size: 1,
                kind: SymbolKind::Text,
                scope,
                weak: false,
                section: SymbolSection::Section(text),
                flags: SymbolFlags::None,
            });
        }
        obj.write().unwrap()
    }

    #[test]
    fn index_lists_only_global_definitions() {
        let object = tiny_object();
        let archive = write_static_archive("a_long_member_name.o", &object).unwrap();
        let mut reader = ar::Archive::new(std::io::Cursor::new(&archive[..]));
        let symbols: Vec<Vec<u8>> = reader.symbols().unwrap().map(<[u8]>::to_vec).collect();
        assert_eq!(symbols, vec![b"a_rather_long_exported_function".to_vec()]);
        let entry = reader.next_entry().unwrap().unwrap();
        assert_eq!(entry.header().identifier(), b"a_long_member_name.o");
        assert_eq!(entry.header().size(), object.len() as u64);
    }

    #[test]
    fn short_names_are_stored_inline() {
        let object = tiny_object();
        let archive = write_static_archive("m.o", &object).unwrap();
        assert!(!archive.windows(3).any(|w| w == b"//\x20"));
        let mut reader = ar::Archive::new(std::io::Cursor::new(&archive[..]));
        let entry = reader.next_entry().unwrap().unwrap();
        assert_eq!(entry.header().identifier(), b"m.o");
    }

    #[test]
    fn rejects_bad_input() {
        assert!(write_static_archive("x.o", b"not an object").is_err());
        assert!(write_static_archive("a/b.o", &tiny_object()).is_err());
        assert!(write_static_archive("", &tiny_object()).is_err());
    }
}
