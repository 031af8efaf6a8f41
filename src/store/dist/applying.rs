//! The dense keys whose round a server is applying on the `RunServer` thread (the updater,
//! then the answers) while its receiver thread goes on with other keys' messages. A message
//! about such a key waits until that round has been applied and answered, and a message that
//! is not about one dense key waits for every such round: each message then sees the state
//! that handling the messages one at a time would give it.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;

#[derive(Default)]
pub struct Applying {
    /// Rounds being applied, per key (one at a time per key: the next message about the key
    /// waits for the one before).
    keys: Mutex<HashMap<i32, usize>>,
    done: Condvar,
}

impl Applying {
    /// A round of `key` is handed to the `RunServer` thread.
    pub fn start(&self, key: i32) {
        *self.keys.lock().entry(key).or_default() += 1;
    }

    /// That round has been applied and answered.
    pub fn finish(&self, key: i32) {
        let mut keys = self.keys.lock();
        if let Some(n) = keys.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&key);
            }
        }
        self.done.notify_all();
    }

    /// Returns once no round of `key` is being applied.
    pub fn wait_key(&self, key: i32) {
        let mut keys = self.keys.lock();
        while keys.contains_key(&key) {
            self.done.wait(&mut keys);
        }
    }

    /// Returns once no round is being applied.
    pub fn wait_all(&self) {
        let mut keys = self.keys.lock();
        while !keys.is_empty() {
            self.done.wait(&mut keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Applying;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_wait_returns_only_after_the_keys_rounds_finish() {
        let a = Arc::new(Applying::default());
        a.start(3);
        a.start(3);
        a.start(4);
        // Another key's round does not hold a message about key 5.
        a.wait_key(5);
        let finished = Arc::new(AtomicBool::new(false));
        let (a2, f2) = (Arc::clone(&a), Arc::clone(&finished));
        let waiter = std::thread::spawn(move || {
            a2.wait_key(3);
            assert!(f2.load(Ordering::SeqCst), "woke before key 3's rounds were applied");
        });
        std::thread::sleep(Duration::from_millis(20));
        a.finish(3);
        std::thread::sleep(Duration::from_millis(20));
        finished.store(true, Ordering::SeqCst);
        a.finish(3);
        waiter.join().unwrap();
        let (a3, f3) = (Arc::clone(&a), Arc::new(AtomicBool::new(false)));
        let f4 = Arc::clone(&f3);
        let all = std::thread::spawn(move || {
            a3.wait_all();
            assert!(f4.load(Ordering::SeqCst), "wait_all returned while key 4 was applied");
        });
        std::thread::sleep(Duration::from_millis(20));
        f3.store(true, Ordering::SeqCst);
        a.finish(4);
        all.join().unwrap();
    }
}
