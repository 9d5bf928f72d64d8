//! Reading and writing numpy `.npy` files (format versions 1–3, little-endian, C order),
//! the format users hold inputs and calibration data in.

use nnc::ir::{DType, Tensor, TensorType};

fn dtype_of(descr: &str) -> Option<DType> {
    Some(match descr.trim_start_matches(['<', '|', '=']) {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        _ => return None,
    })
}

fn descr_of(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        // numpy has no bfloat16 or low-precision types (ml_dtypes adds them, without a
        // standard descr).
        _ => return None,
    })
}

/// The value of `'key':` in the header dict, up to the next top-level comma.
fn header_field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let start = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

pub fn parse(bytes: &[u8]) -> Result<Tensor, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let data_start = header_start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or("truncated .npy header")?;
    let header =
        std::str::from_utf8(&bytes[header_start..data_start]).map_err(|_| "bad .npy header")?;
    let descr = header_field(header, "descr")
        .ok_or("no 'descr' in .npy header")?
        .trim_matches(['\'', '"']);
    let dtype = dtype_of(descr).ok_or_else(|| {
        format!("unsupported .npy dtype '{descr}' (big-endian or object arrays are not read)")
    })?;
    if descr.starts_with('>') {
        return Err("big-endian .npy files are not supported".into());
    }
    if header_field(header, "fortran_order") == Some("True") {
        return Err(
            "Fortran-order .npy files are not supported; save with np.ascontiguousarray".into(),
        );
    }
    let shape_text = header_field(header, "shape").ok_or("no 'shape' in .npy header")?;
    let shape: Vec<usize> = shape_text
        .trim_matches(['(', ')'])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad .npy shape {shape_text}"))
        })
        .collect::<Result<_, _>>()?;
    let ty = TensorType::new(dtype, shape);
    nnc::memory::check_fits(ty.byte_size(), &|| format!("the .npy array {ty}"))?;
    Tensor::from_le_bytes(&ty, &bytes[data_start..]).ok_or_else(|| {
        format!(
            ".npy data holds {} bytes, {} needs {}",
            bytes.len() - data_start,
            ty,
            ty.byte_size()
        )
    })
}

pub fn read(path: &std::path::Path) -> Result<Tensor, String> {
    let bytes = nnc::files::read_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn to_bytes(t: &Tensor) -> Result<Vec<u8>, String> {
    let descr =
        descr_of(t.dtype()).ok_or_else(|| format!("{} cannot be stored in .npy", t.dtype()))?;
    let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so the data starts 64-byte aligned, as numpy does.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let what = || format!("the .npy bytes of {}", t.ty());
    let bytes = t.ty().byte_size();
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    nnc::memory::reserve(&mut out, 2 + header.len() + bytes, &what)?;
    // to_le_bytes makes its own buffer, copied into `out`: room for it too.
    nnc::memory::check_fits(bytes, &what)?;
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(t.to_le_bytes());
    Ok(out)
}
