//! How many connections the metrics endpoint holds: at most [`MAX_CONNECTIONS`] in all and
//! [`PER_CLIENT`] from one address, so a client that opens connections and holds them takes
//! its share and no more (a scraper from another address still gets in). A connection over
//! either cap is closed at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Connections held at once, from every client. Each costs a descriptor and a task; the
/// agent's own connections (shims, `kfdq`) have their descriptors counted apart
/// (`[agent] max_connections`), which leaves 64 descriptors for everything else
/// (`FD_RESERVE`, `src/agent/server/peers.rs`): these 32 and the runtime's few fit in it
/// beside the listeners, the tracer and the files.
pub const MAX_CONNECTIONS: usize = 32;
/// Connections held at once from one client address. Prometheus scrapes over one connection
/// at a time; a probe, a `curl` and a second Prometheus fit beside it.
pub const PER_CLIENT: usize = 8;

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

/// The connections held, counted.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    counts: Arc<Mutex<Counts>>,
}

/// A connection's place under the caps, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<Mutex<Counts>>,
    client: IpAddr,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// [`MAX_CONNECTIONS`] are held.
    Total,
    /// [`PER_CLIENT`] are held from this address.
    Client,
}

impl Limits {
    /// A place for a connection from `client`, if both caps leave one.
    pub fn take(&self, client: IpAddr) -> Result<Slot, Full> {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if c.total >= MAX_CONNECTIONS {
            return Err(Full::Total);
        }
        let n = c.by_client.entry(client).or_insert(0);
        if *n >= PER_CLIENT {
            return Err(Full::Client);
        }
        *n += 1;
        c.total += 1;
        Ok(Slot {
            counts: Arc::clone(&self.counts),
            client,
        })
    }

    /// Connections held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.by_client.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.by_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_takes_its_share_and_another_still_gets_in() {
        let l = Limits::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<Slot> = (0..PER_CLIENT).map(|_| l.take(a).unwrap()).collect();
        assert_eq!(l.take(a).unwrap_err(), Full::Client);
        let other = l.take(b).unwrap();
        drop(held);
        assert_eq!(l.held(), 1);
        drop(other);
        assert_eq!(l.held(), 0);
        assert!(l.take(a).is_ok());
    }

    #[test]
    fn the_total_is_capped_over_every_client() {
        let l = Limits::default();
        let held: Vec<Slot> = (0..MAX_CONNECTIONS)
            .map(|i| {
                l.take(IpAddr::from([10, 0, (i / 200) as u8, (i % 200) as u8]))
                    .unwrap()
            })
            .collect();
        assert_eq!(
            l.take("10.9.9.9".parse().unwrap()).unwrap_err(),
            Full::Total
        );
        drop(held);
        assert_eq!(l.held(), 0);
    }
}
