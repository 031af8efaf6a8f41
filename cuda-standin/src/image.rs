//! Module images: the PTX text or the CUBIN (ELF) that NVRTC makes. Reads the kernels an
//! image defines and the size of each kernel parameter (cuLaunchKernel copies parameters at
//! launch, so it must know their sizes). Anything else is CUDA_ERROR_INVALID_IMAGE.

use crate::result::{CUresult, INVALID_IMAGE};

/// A kernel an image defines: its name and the byte size of each parameter, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<usize>,
}

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// The most bytes of PTX text read looking for its terminating NUL.
const MAX_PTX: usize = 256 << 20;

/// Reads the image at `image` (its length is implied: the ELF headers, or PTX's NUL).
///
/// # Safety
/// `image` must point to a complete ELF image or a NUL-terminated text, as cuModuleLoadData
/// requires.
pub unsafe fn read(image: *const u8) -> Result<Vec<Kernel>, CUresult> {
    if image.is_null() {
        return Err(crate::result::INVALID_VALUE);
    }
    // SAFETY: every image is at least 4 bytes (an ELF magic, or PTX text) by the contract.
    let magic = unsafe { std::slice::from_raw_parts(image, 4) };
    if magic == ELF_MAGIC {
        // SAFETY: forwarded contract: a complete ELF image.
        let bytes = unsafe { elf_bytes(image)? };
        return cubin_kernels(bytes);
    }
    // SAFETY: forwarded contract: NUL-terminated text; the scan stops at the NUL.
    let len = (0..MAX_PTX).find(|&i| unsafe { *image.add(i) } == 0).ok_or(INVALID_IMAGE)?;
    // SAFETY: `len` bytes before the NUL were just read.
    let text = std::str::from_utf8(unsafe { std::slice::from_raw_parts(image, len) }).map_err(|_| INVALID_IMAGE)?;
    ptx_kernels(text)
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, CUresult> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]])).ok_or(INVALID_IMAGE)
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, CUresult> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap())).ok_or(INVALID_IMAGE)
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, CUresult> {
    b.get(at..at + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap())).ok_or(INVALID_IMAGE)
}

const EHDR: usize = 64;
const SHDR: usize = 64;

/// The whole ELF image: the header, then the section headers, say how long it is.
///
/// # Safety
/// `image` points to a complete ELF image.
unsafe fn elf_bytes<'a>(image: *const u8) -> Result<&'a [u8], CUresult> {
    // SAFETY: an ELF image starts with its 64-byte header.
    let header = unsafe { std::slice::from_raw_parts(image, EHDR) };
    if header[4] != 2 || header[5] != 1 {
        return Err(INVALID_IMAGE); // only 64-bit little-endian, as NVRTC makes
    }
    let (shoff, shnum) = (u64_at(header, 0x28)? as usize, u16_at(header, 0x3c)? as usize);
    let table_end = shoff.checked_add(shnum * SHDR).ok_or(INVALID_IMAGE)?;
    // SAFETY: the section header table lies inside the image.
    let with_table = unsafe { std::slice::from_raw_parts(image, table_end) };
    let mut end = table_end;
    for i in 0..shnum {
        let at = shoff + i * SHDR;
        if u32_at(with_table, at + 4)? != 8 {
            // not SHT_NOBITS: the section's bytes are in the file
            end = end.max((u64_at(with_table, at + 24)? + u64_at(with_table, at + 32)?) as usize);
        }
    }
    // SAFETY: every section lies inside the image.
    Ok(unsafe { std::slice::from_raw_parts(image, end) })
}

struct Section<'a> {
    name: &'a str,
    kind: u32,
    link: usize,
    bytes: &'a [u8],
}

fn sections(elf: &[u8]) -> Result<Vec<Section<'_>>, CUresult> {
    let (shoff, shnum, shstrndx) = (u64_at(elf, 0x28)? as usize, u16_at(elf, 0x3c)? as usize, u16_at(elf, 0x3e)? as usize);
    let raw: Vec<(u32, u32, usize, usize, usize)> = (0..shnum)
        .map(|i| {
            let at = shoff + i * SHDR;
            Ok((u32_at(elf, at)?, u32_at(elf, at + 4)?, u64_at(elf, at + 24)? as usize, u64_at(elf, at + 32)? as usize, u32_at(elf, at + 40)? as usize))
        })
        .collect::<Result<_, CUresult>>()?;
    let bytes_of = |off: usize, size: usize| off.checked_add(size).and_then(|end| elf.get(off..end)).ok_or(INVALID_IMAGE);
    let names = raw.get(shstrndx).map(|s| bytes_of(s.2, s.3)).ok_or(INVALID_IMAGE)??;
    raw.iter().map(|&(name, kind, off, size, link)| Ok(Section { name: c_string(names, name as usize)?, kind, link, bytes: if kind == 8 { &[] } else { bytes_of(off, size)? } })).collect()
}

fn c_string(table: &[u8], at: usize) -> Result<&str, CUresult> {
    let tail = table.get(at..).ok_or(INVALID_IMAGE)?;
    let len = tail.iter().position(|&b| b == 0).ok_or(INVALID_IMAGE)?;
    std::str::from_utf8(&tail[..len]).map_err(|_| INVALID_IMAGE)
}

const SHT_SYMTAB: u32 = 2;
const STT_FUNC: u8 = 2;
/// st_other flag of a CUDA kernel (an entry point), as opposed to a device function.
const STO_CUDA_ENTRY: u8 = 0x10;
/// `.nv.info.<kernel>` attribute EIATTR_KPARAM_INFO: one parameter's ordinal, offset, size.
const EIATTR_KPARAM_INFO: u8 = 0x17;
const EIFMT_SVAL: u8 = 0x04;

/// The kernels of a CUBIN: its STT_FUNC symbols marked as entries (STO_CUDA_ENTRY), with parameter sizes from `.nv.info.<name>`.
pub fn cubin_kernels(elf: &[u8]) -> Result<Vec<Kernel>, CUresult> {
    if elf.get(..4) != Some(ELF_MAGIC) {
        return Err(INVALID_IMAGE);
    }
    let sections = sections(elf)?;
    let symtab = sections.iter().find(|s| s.kind == SHT_SYMTAB).ok_or(INVALID_IMAGE)?;
    let strtab = sections.get(symtab.link).ok_or(INVALID_IMAGE)?;
    let mut kernels = Vec::new();
    for symbol in symtab.bytes.chunks_exact(24) {
        if symbol[4] & 0xf != STT_FUNC || symbol[5] & STO_CUDA_ENTRY == 0 {
            continue;
        }
        let name = c_string(strtab.bytes, u32_at(symbol, 0)? as usize)?;
        let info = sections.iter().find(|s| s.name.strip_prefix(".nv.info.") == Some(name));
        kernels.push(Kernel { name: name.to_string(), params: info.map_or(Ok(Vec::new()), |s| cubin_params(s.bytes))? });
    }
    Ok(kernels)
}

/// Parameter sizes from a `.nv.info.<kernel>` section: records of (format, attribute, and
/// for EIFMT_SVAL a 16-bit length and that many bytes; otherwise 2 more bytes).
fn cubin_params(info: &[u8]) -> Result<Vec<usize>, CUresult> {
    let mut by_ordinal = Vec::new();
    let mut at = 0;
    while at + 4 <= info.len() {
        let (format, attribute) = (info[at], info[at + 1]);
        if format != EIFMT_SVAL {
            at += 4;
            continue;
        }
        let len = u16_at(info, at + 2)? as usize;
        let value = info.get(at + 4..at + 4 + len).ok_or(INVALID_IMAGE)?;
        if attribute == EIATTR_KPARAM_INFO && len >= 12 {
            let ordinal = u16_at(value, 4)? as usize;
            let size = ((u32_at(value, 8)? >> 18) & 0x3fff) as usize;
            by_ordinal.push((ordinal, size));
        }
        at += 4 + len;
    }
    by_ordinal.sort_unstable();
    if by_ordinal.iter().enumerate().any(|(i, (ordinal, _))| i != *ordinal) {
        return Err(INVALID_IMAGE);
    }
    Ok(by_ordinal.into_iter().map(|(_, size)| size).collect())
}

/// The kernels of PTX text: each `.entry NAME(` and its `.param` list.
pub fn ptx_kernels(text: &str) -> Result<Vec<Kernel>, CUresult> {
    if !text.contains(".version") || !text.contains(".target") {
        return Err(INVALID_IMAGE);
    }
    let mut kernels = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let open = rest.find('(');
        let head_end = rest.find(['{', ';']).unwrap_or(rest.len());
        let name_end = open.filter(|o| *o < head_end).unwrap_or(head_end);
        let name = rest[..name_end].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.') {
            return Err(INVALID_IMAGE);
        }
        let params = match open.filter(|o| *o < head_end) {
            Some(o) => {
                let close = rest[o..].find(')').ok_or(INVALID_IMAGE)? + o;
                rest[o + 1..close].split(',').map(str::trim).filter(|p| !p.is_empty()).map(ptx_param_size).collect::<Result<_, _>>()?
            }
            None => Vec::new(),
        };
        kernels.push(Kernel { name: name.to_string(), params });
    }
    Ok(kernels)
}

/// `.param [.ptr .global] [.align N] .TYPE name[COUNT]` → bytes.
fn ptx_param_size(declaration: &str) -> Result<usize, CUresult> {
    let tokens: Vec<&str> = declaration.split_whitespace().collect();
    if tokens.first() != Some(&".param") {
        return Err(INVALID_IMAGE);
    }
    let element = tokens
        .iter()
        .find_map(|t| match t.get(2..).filter(|_| t.starts_with('.')).and_then(|bits| bits.parse::<usize>().ok()) {
            Some(bits) if matches!(&t[1..2], "u" | "s" | "b" | "f") => Some(bits / 8),
            _ => None,
        })
        .ok_or(INVALID_IMAGE)?;
    let name = tokens.last().ok_or(INVALID_IMAGE)?;
    let count = match name.find('[') {
        Some(open) => name[open + 1..name.len() - 1].parse::<usize>().map_err(|_| INVALID_IMAGE)?,
        None => 1,
    };
    Ok(element * count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ptx_entries_and_parameter_sizes() {
        let ptx = ".version 8.5\n.target sm_90\n.address_size 64\n.visible .entry k1(\n\t.param .u64 .ptr .global .align 8 k1_param_0,\n\t.param .u32 k1_param_1,\n\t.param .align 8 .b8 k1_param_2[24]\n)\n{ ret; }\n.entry k2()\n{ ret; }\n.visible .entry k3\n{ ret; }\n";
        let kernels = ptx_kernels(ptx).unwrap();
        assert_eq!(kernels, vec![Kernel { name: "k1".into(), params: vec![8, 4, 24] }, Kernel { name: "k2".into(), params: vec![] }, Kernel { name: "k3".into(), params: vec![] }]);
    }

    #[test]
    fn refuses_text_that_is_not_ptx() {
        assert_eq!(ptx_kernels("hello world"), Err(INVALID_IMAGE));
        assert_eq!(ptx_kernels(".version 8.5\n.target sm_90\n.entry (\n"), Err(INVALID_IMAGE));
        assert_eq!(cubin_kernels(b"\x7fELF\x02\x01"), Err(INVALID_IMAGE));
    }

    #[test]
    fn reads_kparam_info_records() {
        // Two parameters as NVRTC 12.9 writes them for (float*, int): ordinal 1 first.
        let mut info = vec![0x04, 0x37, 4, 0, 0x81, 0, 0, 0];
        info.extend_from_slice(&[0x04, 0x17, 12, 0, 0, 0, 0, 0, 1, 0, 8, 0, 0, 0xf0, 0x11, 0]);
        info.extend_from_slice(&[0x04, 0x17, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x21, 0]);
        info.extend_from_slice(&[0x03, 0x1b, 0xff, 0]);
        assert_eq!(cubin_params(&info), Ok(vec![8, 4]));
    }
}
