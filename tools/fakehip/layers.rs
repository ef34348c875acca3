/// fakehip's C files (in `src/`) in layers, the bottom first. A file calls functions and uses
/// variables of the layers before its own only: never of its own layer or of one above
/// (`tests/layers.rs` checks it on the object files; `src/fakehip_internal.h` says what each
/// file holds). Shared by `build.rs`, which compiles exactly these files, and the crate.
pub const LAYERS: &[&[&str]] = &[
    // 0: the global state and the helpers every file uses
    &["runtime.c"],
    // 1: devices, queue buffers, graph objects
    &["topology.c", "buffer.c", "graph.c"],
    // 2: KFD queues, pools, packets, completion
    &["queue.c"],
    // 3: events and the waits that stamp them
    &["event.c"],
    // 4: stream objects
    &["stream.c"],
    // 5: initialisation, fork handling, teardown
    &["init.c"],
    // 6: submitting to and waiting for a stream or an event, from a HIP call
    &["submit.c", "sync.c"],
    // 7: the exported HIP calls and fakehip's extensions
    &[
        "hip_device.c",
        "hip_memory.c",
        "hip_stream.c",
        "hip_event.c",
        "hip_launch.c",
        "hip_ext.c",
    ],
];
