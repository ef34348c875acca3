//! ABI cross-check: a C program compiled against the system `linux/kfd_ioctl.h` (even the old
//! 1.11 one) prints sizeof/offsetof of every struct the two headers share and the ioctl numbers;
//! they must equal the Rust bindings. The struct list below drives both sides.

use kfd_sys as sys;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// (struct, field, Rust offset, Rust size, needs minor)
type Field = (&'static str, &'static str, usize, usize, u32);

macro_rules! fields {
    ($min:expr, $t:ident : $($f:ident),+) => {
        vec![$( (stringify!($t), stringify!($f), offset_of!(sys::$t, $f), field_size(|s: &sys::$t| &s.$f), $min) ),+]
    };
}

fn shared_fields() -> Vec<Field> {
    let mut v = Vec::new();
    v.extend(fields!(0, kfd_ioctl_get_version_args: major_version, minor_version));
    v.extend(fields!(0, kfd_ioctl_create_queue_args: ring_base_address, write_pointer_address, read_pointer_address,
        doorbell_offset, ring_size, gpu_id, queue_type, queue_percentage, queue_priority, queue_id,
        eop_buffer_address, eop_buffer_size, ctx_save_restore_address, ctx_save_restore_size, ctl_stack_size));
    v.extend(fields!(0, kfd_ioctl_destroy_queue_args: queue_id, pad));
    v.extend(fields!(0, kfd_ioctl_update_queue_args: ring_base_address, queue_id, ring_size, queue_percentage, queue_priority));
    v.extend(fields!(0, kfd_ioctl_set_cu_mask_args: queue_id, num_cu_mask, cu_mask_ptr));
    v.extend(fields!(0, kfd_ioctl_get_queue_wave_state_args: ctl_stack_address, ctl_stack_used_size, save_area_used_size, queue_id, pad));
    v.extend(fields!(0, kfd_ioctl_acquire_vm_args: drm_fd, gpu_id));
    v.extend(fields!(0, kfd_ioctl_alloc_memory_of_gpu_args: va_addr, size, handle, mmap_offset, gpu_id, flags));
    v.extend(fields!(0, kfd_ioctl_free_memory_of_gpu_args: handle));
    v.extend(fields!(0, kfd_ioctl_map_memory_to_gpu_args: handle, device_ids_array_ptr, n_devices, n_success));
    v.extend(fields!(0, kfd_ioctl_unmap_memory_from_gpu_args: handle, device_ids_array_ptr, n_devices, n_success));
    v.extend(fields!(0, kfd_process_device_apertures: lds_base, lds_limit, scratch_base, scratch_limit, gpuvm_base, gpuvm_limit, gpu_id, pad));
    v.extend(fields!(0, kfd_ioctl_get_process_apertures_new_args: kfd_process_device_apertures_ptr, num_of_nodes, pad));
    // `pad` became `misc_process_flag` in 1.23.
    v.extend(fields!(0, kfd_ioctl_set_memory_policy_args: alternate_aperture_base, alternate_aperture_size, gpu_id, default_policy, alternate_policy));
    v.extend(fields!(0, kfd_ioctl_get_clock_counters_args: gpu_clock_counter, cpu_clock_counter, system_clock_counter, system_clock_freq, gpu_id, pad));
    v.extend(fields!(0, kfd_ioctl_set_scratch_backing_va_args: va_addr, gpu_id, pad));
    v.extend(fields!(0, kfd_ioctl_get_available_memory_args: available, gpu_id, pad));
    v.extend(fields!(0, kfd_ioctl_set_trap_handler_args: tba_addr, tma_addr, gpu_id, pad));
    v.extend(fields!(0, kfd_ioctl_set_xnack_mode_args: xnack_enabled));
    v.extend(fields!(0, kfd_ioctl_create_event_args: event_page_offset, event_trigger_data, event_type, auto_reset, node_id, event_id, event_slot_index));
    v.extend(fields!(0, kfd_ioctl_destroy_event_args: event_id, pad));
    v.extend(fields!(0, kfd_ioctl_set_event_args: event_id, pad));
    v.extend(fields!(0, kfd_ioctl_reset_event_args: event_id, pad));
    v.extend(fields!(0, kfd_event_data: kfd_event_data_ext, event_id, pad));
    v.extend(fields!(0, kfd_ioctl_wait_events_args: events_ptr, num_events, wait_for_all, timeout, wait_result));
    v.extend(fields!(13, kfd_ioctl_runtime_enable_args: r_debug, mode_mask, capabilities_mask));
    v.extend(fields!(13, kfd_runtime_info: r_debug, runtime_state, ttmp_setup));
    v.extend(fields!(13, kfd_ioctl_dbg_trap_args: pid, op));
    v.extend(
        fields!(13, kfd_ioctl_dbg_trap_enable_args: exception_mask, rinfo_ptr, rinfo_size, dbg_fd),
    );
    v.extend(fields!(13, kfd_ioctl_dbg_trap_suspend_queues_args: exception_mask, queue_array_ptr, num_queues, grace_period));
    v.extend(fields!(13, kfd_ioctl_dbg_trap_resume_queues_args: queue_array_ptr, num_queues, pad));
    v.extend(fields!(13, kfd_ioctl_dbg_trap_queue_snapshot_args: exception_mask, snapshot_buf_ptr, num_queues, entry_size));
    v.extend(fields!(13, kfd_queue_snapshot_entry: exception_status, ring_base_address, write_pointer_address,
        read_pointer_address, ctx_save_restore_address, queue_id, gpu_id, ring_size, queue_type, ctx_save_restore_area_size, reserved));
    v.extend(fields!(13, kfd_context_save_area_header: wave_state, debug_offset, debug_size, err_payload_addr, err_event_id, reserved1));
    v
}

fn struct_sizes() -> Vec<(&'static str, usize, u32)> {
    macro_rules! s {
        ($min:expr, $t:ident) => {
            (stringify!($t), size_of::<sys::$t>(), $min)
        };
    }
    vec![
        s!(0, kfd_ioctl_get_version_args),
        s!(0, kfd_ioctl_create_queue_args),
        s!(0, kfd_ioctl_destroy_queue_args),
        s!(0, kfd_ioctl_update_queue_args),
        s!(0, kfd_ioctl_set_cu_mask_args),
        s!(0, kfd_ioctl_get_queue_wave_state_args),
        s!(0, kfd_ioctl_acquire_vm_args),
        s!(0, kfd_ioctl_alloc_memory_of_gpu_args),
        s!(0, kfd_ioctl_free_memory_of_gpu_args),
        s!(0, kfd_ioctl_map_memory_to_gpu_args),
        s!(0, kfd_ioctl_unmap_memory_from_gpu_args),
        s!(0, kfd_process_device_apertures),
        s!(0, kfd_ioctl_get_process_apertures_new_args),
        s!(0, kfd_ioctl_set_memory_policy_args),
        s!(0, kfd_ioctl_get_clock_counters_args),
        s!(0, kfd_ioctl_set_scratch_backing_va_args),
        s!(0, kfd_ioctl_get_available_memory_args),
        s!(0, kfd_ioctl_set_trap_handler_args),
        s!(0, kfd_ioctl_set_xnack_mode_args),
        s!(0, kfd_ioctl_create_event_args),
        s!(0, kfd_event_data),
        s!(0, kfd_ioctl_wait_events_args),
        s!(13, kfd_ioctl_runtime_enable_args),
        s!(13, kfd_runtime_info),
        s!(13, kfd_ioctl_dbg_trap_args),
        s!(13, kfd_queue_snapshot_entry),
        s!(13, kfd_context_save_area_header),
    ]
}

fn ioctls() -> Vec<(&'static str, u64, u32)> {
    macro_rules! i {
        ($min:expr, $n:ident) => {
            (stringify!($n), sys::$n as u64, $min)
        };
    }
    vec![
        i!(0, AMDKFD_IOC_GET_VERSION),
        i!(0, AMDKFD_IOC_CREATE_QUEUE),
        i!(0, AMDKFD_IOC_DESTROY_QUEUE),
        i!(0, AMDKFD_IOC_UPDATE_QUEUE),
        i!(0, AMDKFD_IOC_ACQUIRE_VM),
        i!(0, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU),
        i!(0, AMDKFD_IOC_FREE_MEMORY_OF_GPU),
        i!(0, AMDKFD_IOC_MAP_MEMORY_TO_GPU),
        i!(0, AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU),
        i!(0, AMDKFD_IOC_SET_CU_MASK),
        i!(0, AMDKFD_IOC_GET_QUEUE_WAVE_STATE),
        i!(0, AMDKFD_IOC_SET_MEMORY_POLICY),
        i!(0, AMDKFD_IOC_GET_CLOCK_COUNTERS),
        i!(0, AMDKFD_IOC_CREATE_EVENT),
        i!(0, AMDKFD_IOC_DESTROY_EVENT),
        i!(0, AMDKFD_IOC_SET_EVENT),
        i!(0, AMDKFD_IOC_RESET_EVENT),
        i!(0, AMDKFD_IOC_WAIT_EVENTS),
        i!(0, AMDKFD_IOC_SET_SCRATCH_BACKING_VA),
        i!(0, AMDKFD_IOC_GET_PROCESS_APERTURES_NEW),
        i!(0, AMDKFD_IOC_SET_TRAP_HANDLER),
        i!(0, AMDKFD_IOC_SET_XNACK_MODE),
        i!(0, AMDKFD_IOC_AVAILABLE_MEMORY),
        i!(13, AMDKFD_IOC_RUNTIME_ENABLE),
        i!(13, AMDKFD_IOC_DBG_TRAP),
    ]
}

fn system_header() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KFD_IOCTL_H") {
        return Some(PathBuf::from(p));
    }
    let p = PathBuf::from("/usr/include/linux/kfd_ioctl.h");
    p.exists().then_some(p)
}

fn c_program(header: &str) -> String {
    let mut c = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"{header}\"\nint main(void) {{\n  printf(\"V %d\\n\", KFD_IOCTL_MINOR_VERSION);\n"
    );
    let guard = |min: u32, body: String| {
        if min > 0 {
            format!("#if KFD_IOCTL_MINOR_VERSION >= {min}\n{body}#endif\n")
        } else {
            body
        }
    };
    for (s, _, min) in struct_sizes() {
        c += &guard(
            min,
            format!("  printf(\"S {s} %zu\\n\", sizeof(struct {s}));\n"),
        );
    }
    for (s, f, _, _, min) in shared_fields() {
        c += &guard(
            min,
            format!(
                "  printf(\"F {s} {f} %zu %zu\\n\", offsetof(struct {s}, {f}), sizeof(((struct {s}*)0)->{f}));\n"
            ),
        );
    }
    for (n, _, min) in ioctls() {
        c += &guard(
            min,
            format!("  printf(\"I {n} %lu\\n\", (unsigned long){n});\n"),
        );
    }
    c + "  return 0;\n}\n"
}

#[test]
fn c_layout_matches_rust_bindings() {
    let Some(header) = system_header() else {
        panic!(
            "no system linux/kfd_ioctl.h to cross-check against: install linux-libc-dev (scripts/setup.sh does) or set KFD_IOCTL_H"
        );
    };
    let dir = std::env::temp_dir().join(format!("kfd-sys-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&src, c_program(&header.display().to_string())).unwrap();
    let stub = concat!(env!("CARGO_MANIFEST_DIR"), "/include/stub");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(format!("-I{stub}"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling the ABI probe failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the ABI probe");
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let mut c_minor = 0;
    let (mut structs, mut fields, mut numbers) = (0, 0, 0);
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["V", m] => c_minor = m.parse().unwrap(),
            ["S", name, size] => {
                let size: usize = size.parse().unwrap();
                let (_, rust, _) = struct_sizes()
                    .into_iter()
                    .find(|(n, _, _)| n == name)
                    .unwrap();
                if *name == "kfd_ioctl_create_queue_args" {
                    // 1.11..1.16 headers end after ctl_stack_size (88 bytes); 1.17+ adds
                    // sdma_engine_id + pad (96). The kernel accepts both (size tolerance).
                    assert!(
                        size == 88 || size == 96,
                        "system create_queue args are {size} bytes"
                    );
                    assert_eq!(rust, 96);
                } else {
                    assert_eq!(size, rust, "sizeof(struct {name}): C {size}, Rust {rust}");
                }
                structs += 1;
            }
            ["F", s, f, off, size] => {
                let (_, _, ro, rs, _) = shared_fields()
                    .into_iter()
                    .find(|(a, b, ..)| a == s && b == f)
                    .unwrap();
                assert_eq!(
                    (
                        off.parse::<usize>().unwrap(),
                        size.parse::<usize>().unwrap()
                    ),
                    (ro, rs),
                    "{s}.{f}: C (offset, size) vs Rust"
                );
                fields += 1;
            }
            ["I", name, num] => {
                let c: u64 = num.parse().unwrap();
                let (_, rust, _) = ioctls().into_iter().find(|(n, _, _)| n == name).unwrap();
                if *name == "AMDKFD_IOC_CREATE_QUEUE" && c != rust {
                    // Same direction, type and nr; only the encoded size (88 vs 96) differs.
                    assert_eq!(
                        c & !0x3fff_0000,
                        rust & !0x3fff_0000,
                        "{name}: C {c:#x} vs Rust {rust:#x}"
                    );
                    assert_eq!((c >> 16) & 0x3fff, 88);
                } else {
                    assert_eq!(c, rust, "{name}: C {c:#x} vs Rust {rust:#x}");
                }
                numbers += 1;
            }
            _ => panic!("unexpected probe line {line:?}"),
        }
    }
    println!(
        "cross-checked {structs} structs, {fields} fields, {numbers} request numbers against {} (KFD 1.{c_minor})",
        header.display()
    );
    assert!(
        structs >= 11 && fields >= 49 && numbers >= 11,
        "probe printed too little: {text}"
    );
    if c_minor >= 13 {
        assert!(structs >= 16 && numbers >= 13);
    }
}
