//! Ids of the KFD interface: a GPU node's `gpu_id` and a process's queue id. Defined at the
//! crate's root ([`crate::ids`]), shared with the layers above; re-exported here in the safe
//! layer's terms.

pub use crate::ids::{GpuId, QueueId};
