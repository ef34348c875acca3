//! Names and kernel-argument layouts of the kernels real programs dispatch, read from the
//! AMDGPU code object the runtime loaded into the client's memory.
//!
//! An AQL dispatch names its kernel by the address of its kernel descriptor (`kernel_object`),
//! which lies inside a loaded code object (an ELF image whose first loaded segment starts with
//! the ELF header). The emulator finds the image's start by looking for the ELF magic at page
//! boundaries below the descriptor, reads the dynamic symbol table to find the `<name>.kd`
//! symbol at the descriptor's offset, and reads the `NT_AMDGPU_METADATA` note (MessagePack,
//! `amdhsa.kernels[].{.name, .args[].{.name, .offset, .size}}`) for the argument layout.
//! Results are cached per process and descriptor address; a descriptor that cannot be resolved
//! is cached as unknown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::abi::{u16_at, u32_at, u64_at};

/// Memory of one process as the GPU sees it (implemented by `gpu_mem::Vm`).
pub(crate) trait GpuMemory {
    /// The process.
    fn tgid(&self) -> u32;
    /// Reads `buf.len()` bytes at GPU address `addr`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), i32>;
    /// Start of the mapping or BO `addr` lies in.
    fn region_start(&self, addr: u64) -> Option<u64>;
}

/// How far below a kernel descriptor the ELF header of its image is searched.
const SEARCH_LIMIT: u64 = 256 << 20;
const PAGE: u64 = 4096;
const EM_AMDGPU: u16 = 224;
const PT_DYNAMIC: u32 = 2;
const PT_NOTE: u32 = 4;
const DT_HASH: u64 = 4;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_STRSZ: u64 = 10;
const NT_AMDGPU_METADATA: u32 = 32;
/// Largest dynamic symbol table read (entries).
const MAX_SYMBOLS: u64 = 1 << 20;

/// One kernel argument: its name in the metadata, byte offset and size in the kernarg segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arg {
    pub name: String,
    pub offset: u32,
    pub size: u32,
}

/// A kernel a dispatch runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kernel {
    /// Kernel name (the descriptor's symbol without `.kd`).
    pub name: String,
    /// Arguments from the metadata (empty when the image has no readable metadata).
    pub args: Vec<Arg>,
}

impl Kernel {
    /// The argument called `name`.
    pub fn arg(&self, name: &str) -> Option<&Arg> {
        self.args.iter().find(|a| a.name == name)
    }
}

/// Resolved descriptors: (tgid, kernel_object) -> kernel (`None`: not in a readable image).
type Resolved = HashMap<(u32, u64), Option<Arc<Kernel>>>;

/// Cache of resolved descriptors.
#[derive(Default)]
pub(crate) struct KernelCache {
    map: Mutex<Resolved>,
}

impl KernelCache {
    /// The kernel whose descriptor is at `kernel_object` in process `tgid`.
    pub fn lookup(&self, vm: &dyn GpuMemory, kernel_object: u64) -> Option<Arc<Kernel>> {
        let tgid = vm.tgid();
        if let Some(k) = self.lock().get(&(tgid, kernel_object)) {
            return k.clone();
        }
        let k = resolve(vm, kernel_object).map(Arc::new);
        if k.is_none() {
            tracing::debug!(
                tgid,
                kernel_object,
                "kernel descriptor not in a readable code object"
            );
        }
        self.lock().insert((tgid, kernel_object), k.clone());
        k
    }

    /// Forgets a process's kernels (it exited; its addresses mean nothing any more).
    pub fn forget(&self, tgid: u32) {
        self.lock().retain(|(t, _), _| *t != tgid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Resolved> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn read(vm: &dyn GpuMemory, addr: u64, len: u64) -> Option<Vec<u8>> {
    let mut b = vec![0u8; usize::try_from(len).ok()?];
    vm.read(addr, &mut b).ok()?;
    Some(b)
}

/// A loaded image: its base address and program headers (type, vaddr, memsz).
struct Image {
    base: u64,
    segments: Vec<(u32, u64, u64)>,
}

/// The AMDGPU ELF image starting at `base`, if there is one.
fn image_at(vm: &dyn GpuMemory, base: u64) -> Option<Image> {
    let eh = read(vm, base, 64)?;
    if eh[..4] != *b"\x7fELF" || eh[4] != 2 || u16_at(&eh, 0x12)? != EM_AMDGPU {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(&eh, 0x20)?, u16_at(&eh, 0x36)?, u16_at(&eh, 0x38)?);
    if phentsize < 56 || phnum == 0 || phnum > 64 {
        return None;
    }
    let ph = read(vm, base + phoff, u64::from(phentsize) * u64::from(phnum))?;
    let segments = (0..usize::from(phnum))
        .filter_map(|i| {
            let at = i * usize::from(phentsize);
            Some((
                u32_at(&ph, at)?,
                u64_at(&ph, at + 16)?,
                u64_at(&ph, at + 40)?,
            ))
        })
        .collect();
    Some(Image { base, segments })
}

/// The name of the symbol whose value is `value` (a `.kd` symbol), from the dynamic table.
fn symbol_at(vm: &dyn GpuMemory, img: &Image, value: u64) -> Option<String> {
    let &(_, dyn_va, dyn_size) = img.segments.iter().find(|s| s.0 == PT_DYNAMIC)?;
    let dynamic = read(vm, img.base + dyn_va, dyn_size.min(64 << 10))?;
    let mut tags = HashMap::new();
    for e in dynamic.chunks_exact(16) {
        let (tag, val) = (u64_at(e, 0)?, u64_at(e, 8)?);
        if tag == 0 {
            break;
        }
        tags.insert(tag, val);
    }
    let (symtab, strtab) = (*tags.get(&DT_SYMTAB)?, *tags.get(&DT_STRTAB)?);
    let strsz = tags.get(&DT_STRSZ).copied().unwrap_or(1 << 20);
    let count = match tags.get(&DT_HASH) {
        Some(hash) => u64::from(u32_at(&read(vm, img.base + hash, 8)?, 4)?),
        None if strtab > symtab => (strtab - symtab) / 24,
        None => return None,
    }
    .min(MAX_SYMBOLS);
    let syms = read(vm, img.base + symtab, count * 24)?;
    let strings = read(vm, img.base + strtab, strsz.min(16 << 20))?;
    syms.chunks_exact(24).find_map(|s| {
        if u64_at(s, 8)? != value {
            return None;
        }
        let start = usize::try_from(u32_at(s, 0)?).ok()?;
        let end = start + strings.get(start..)?.iter().position(|c| *c == 0)?;
        let name = std::str::from_utf8(&strings[start..end]).ok()?;
        name.strip_suffix(".kd").map(str::to_string)
    })
}

/// The argument list of kernel `name` from the image's metadata note.
fn metadata_args(vm: &dyn GpuMemory, img: &Image, name: &str) -> Vec<Arg> {
    let notes = img
        .segments
        .iter()
        .filter(|s| s.0 == PT_NOTE)
        .filter_map(|s| read(vm, img.base + s.1, s.2.min(16 << 20)));
    for note in notes {
        let mut at = 0usize;
        while let (Some(namesz), Some(descsz), Some(kind)) = (
            u32_at(&note, at),
            u32_at(&note, at + 4),
            u32_at(&note, at + 8),
        ) {
            let name_at = at + 12;
            let desc_at = name_at + (namesz as usize).next_multiple_of(4);
            let next = desc_at + (descsz as usize).next_multiple_of(4);
            if kind == NT_AMDGPU_METADATA
                && let Some(desc) = note.get(desc_at..desc_at + descsz as usize)
                && let Some(args) = args_from_msgpack(desc, name)
            {
                return args;
            }
            if next <= at || next > note.len() {
                break;
            }
            at = next;
        }
    }
    Vec::new()
}

fn map_get<'a>(v: &'a rmpv::Value, key: &str) -> Option<&'a rmpv::Value> {
    v.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// `amdhsa.kernels[.name == name].args` of a metadata document.
pub(crate) fn args_from_msgpack(mut desc: &[u8], name: &str) -> Option<Vec<Arg>> {
    let doc = rmpv::decode::read_value(&mut desc).ok()?;
    let kernels = map_get(&doc, "amdhsa.kernels")?.as_array()?;
    let kernel = kernels
        .iter()
        .find(|k| map_get(k, ".name").and_then(|n| n.as_str()) == Some(name))?;
    let args = map_get(kernel, ".args").and_then(|a| a.as_array())?;
    Some(
        args.iter()
            .filter_map(|a| {
                Some(Arg {
                    name: map_get(a, ".name")?.as_str()?.to_string(),
                    offset: u32::try_from(map_get(a, ".offset")?.as_u64()?).ok()?,
                    size: u32::try_from(map_get(a, ".size")?.as_u64()?).ok()?,
                })
            })
            .collect(),
    )
}

/// Finds the image holding the descriptor at `kernel_object` and the kernel's name and
/// arguments. Only the memory region (client mapping or BO) holding the descriptor is searched,
/// from the descriptor down, at most `SEARCH_LIMIT` bytes.
fn resolve(vm: &dyn GpuMemory, kernel_object: u64) -> Option<Kernel> {
    let floor = vm.region_start(kernel_object)?;
    let top = kernel_object & !(PAGE - 1);
    let mut page = top;
    while page >= floor && top - page <= SEARCH_LIMIT {
        if let Some(img) = image_at(vm, page)
            && let Some(name) = symbol_at(vm, &img, kernel_object - page)
        {
            let args = metadata_args(vm, &img, &name);
            return Some(Kernel { name, args });
        }
        page = page.checked_sub(PAGE)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msgpack_metadata_args() {
        use rmpv::Value;
        let arg = |n: &str, o: u64, s: u64| {
            Value::Map(vec![
                (Value::from(".name"), Value::from(n)),
                (Value::from(".offset"), Value::from(o)),
                (Value::from(".size"), Value::from(s)),
            ])
        };
        let kernel = Value::Map(vec![
            (Value::from(".name"), Value::from("copy")),
            (
                Value::from(".args"),
                Value::Array(vec![arg("src", 0, 8), arg("size", 16, 8)]),
            ),
        ]);
        let doc = Value::Map(vec![(
            Value::from("amdhsa.kernels"),
            Value::Array(vec![kernel]),
        )]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &doc).unwrap();
        let args = args_from_msgpack(&bytes, "copy").unwrap();
        assert_eq!(
            args[1],
            Arg {
                name: "size".into(),
                offset: 16,
                size: 8
            }
        );
        assert!(args_from_msgpack(&bytes, "other").is_none());
        assert!(args_from_msgpack(&bytes[..5], "copy").is_none());
    }
}
