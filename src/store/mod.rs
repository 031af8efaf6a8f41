//! The key-value store of every MXNet type: init, push (sum, then updater or assignment),
//! pull, push-pull and broadcast, with int or string keys. Each call is checked once, by the
//! planner (`plan`, with the rules of the store's comm), before anything changes; then the
//! store's values meet where its [`Comm`] says: here (`local`, `device`, `nccl`), or on the
//! servers of a distributed store (`dist`).

pub(crate) mod batch;
mod comm;
mod devices;
pub mod dist;
pub mod env;
mod entries;
mod fusion;
mod keys;
mod nccl;
mod plan;
mod turns;
mod updater;

pub use keys::{KeyRegistry, KeyType, Keys};
pub use comm::{Comm, Rules, Servers, StoreKind};
pub use updater::{IntUpdater, StrUpdater, UpdaterKey, Updaters};

use crate::backend::{CompressedSumJob, GradientCompression, RowSparsePull, SumJob, SumOrder};
use crate::error::Result;
use crate::ndarray::{Context, NDArray, StorageType};
use entries::Entries;
use crate::profiler::{self, Arg, Class};
use parking_lot::{Mutex, RwLock};
use plan::PushPlan;
use std::cell::Cell;
use std::ffi::CString;
use std::sync::Arc;

/// A call's arrays, shared with the ops that use them: a call repeating an earlier call's
/// arrays may hand over the same vector (see `ffi::handle`), with no reference taken per
/// array.
pub type Arrays = Arc<Vec<NDArray>>;

/// Where stores keep values, as MXNet's do (`Comm::pinned_ctx_`).
pub const STORE_CONTEXT: Context = Context::cpu_pinned(0);

/// A stored key.
pub(crate) struct Entry {
    stored: NDArray,
    /// Reused buffer for the sum handed to an updater when several values are pushed.
    merge: Option<NDArray>,
    /// Gradient-compression residuals, one per position in the key's pushed values.
    residuals: Vec<NDArray>,
    /// The sum of the key's last push, while a pull may still join it.
    joinable: Option<fusion::Joinable>,
    /// Its merge buffer's context in a `device` store, once placed (a placed key keeps it).
    merge_home: Option<Context>,
}

impl Entry {
    fn new(stored: NDArray) -> Entry {
        Entry { stored, merge: None, residuals: Vec::new(), joinable: None, merge_home: None }
    }

}

#[derive(Default)]
struct State {
    keys: KeyRegistry,
    entries: Entries,
    compression: Option<GradientCompression>,
    /// Merge-buffer placement of a `device` store with GPU values.
    placement: crate::backend::MergePlacement,
    /// An `nccl` store's device set, once a push summing several values fixed it.
    nccl: Option<nccl::DeviceSet>,
}

/// A store.
pub struct KVStore {
    type_name: CString,
    comm: Box<dyn Comm>,
    state: Mutex<State>,
    updaters: RwLock<Updaters>,
    /// Whether an updater call first waits for its arrays (see [`KVStore::set_updaters_wait`]).
    updaters_wait: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for KVStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KVStore({})", self.type_name.to_string_lossy())
    }
}

impl KVStore {
    /// A store of MXNet type `type_name` (matched lower-cased, as MXNet does).
    pub fn new(type_name: &str) -> Result<KVStore> {
        let lower = type_name.to_lowercase();
        crate::ensure!(!lower.contains('\0'), "store type contains a NUL byte");
        let comm: Box<dyn Comm> = match dist::dist_mode(&lower) {
            Some(mode) => Box::new(dist::DistStore::new(mode)?),
            None => comm::for_name(&lower)?,
        };
        Self::with_comm(lower, comm)
    }

    /// A store of type `lower` on `comm` (tests give it comms of their own).
    pub(crate) fn with_comm(lower: String, comm: Box<dyn Comm>) -> Result<KVStore> {
        let type_name = CString::new(lower).map_err(|_| crate::Error::new("store type contains a NUL byte"))?;
        Ok(KVStore {
            type_name,
            comm,
            state: Mutex::new(State::default()),
            updaters: RwLock::new(Updaters::default()),
            updaters_wait: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The lower-cased type name.
    pub fn type_name(&self) -> &CString {
        &self.type_name
    }

    /// The communication kind.
    pub fn kind(&self) -> StoreKind {
        self.comm.kind()
    }

    fn sum_order(&self) -> SumOrder {
        self.comm.sum_order()
    }

    /// Whether this is an `nccl` store (MXNet's `KVStoreNCCL`: see [`nccl`]).
    fn is_nccl(&self) -> bool {
        self.kind() == StoreKind::Nccl
    }

    /// An `nccl` store's checks of a checked push: its keys summing several values on the
    /// store's device set (fixing it on the first such push); returns the set after the push.
    /// `None` for other stores.
    fn nccl_push(&self, state: &State, plan: &PushPlan) -> Result<Option<Option<nccl::DeviceSet>>> {
        if !self.is_nccl() {
            return Ok(None);
        }
        nccl::check_push(&state.nccl, plan, &Self::shown(&state.keys)).map(Some)
    }

    /// How a key appears in messages: the user's int or string.
    fn shown(keys: &KeyRegistry) -> impl Fn(i32) -> String + '_ {
        move |id| match keys.key_type() {
            Some(KeyType::Str) => keys.name(id).map_or(id.to_string(), |n| n.to_string_lossy().into_owned()),
            _ => id.to_string(),
        }
    }

    /// Stores deep copies of `values` under new keys.
    pub fn init(&self, keys: Keys, values: &[NDArray]) -> Result<()> {
        let _trace = profiler::span(Class::Call, "init", || trace_args(&keys, values));
        let servers = self.comm.servers("init")?;
        check_len(&keys, values.len())?;
        let rules = self.comm.rules();
        let mut state = self.state.lock();
        let State { keys: registry, entries, placement, compression, .. } = &mut *state;
        // New string keys are registered first (messages name them), and forgotten again if
        // the call fails: a failing init changes nothing.
        let mark = registry.mark();
        let nccl = self.is_nccl();
        let made = registry.register(&keys).and_then(|ids| {
            if nccl {
                nccl::check_dense(&ids, values, &Self::shown(registry), "value to initialise")?;
            }
            let plan = plan::plan_init(entries, &ids, &Self::shown(registry), values)?;
            plan::check_init_rules(&rules, &plan, &Self::shown(registry))?;
            // Every stored value is made before any is stored.
            let stored = plan::new_stored_values(&plan, STORE_CONTEXT)?;
            entries.try_reserve(plan.len()).map_err(|_| crate::Error::out_of_memory("the store's key table"))?;
            Ok((plan, stored))
        });
        let (plan, mut stored) = match made {
            Ok(made) => made,
            Err(e) => {
                registry.rollback(mark);
                return Err(e);
            }
        };
        if let Some(servers) = servers {
            // The values go to the servers; this worker's buffers are filled by pulls.
            let inits: Vec<(i32, NDArray, NDArray)> = plan.iter().filter_map(|(id, v)| stored.remove(id).map(|s| (*id, v.clone(), s))).collect();
            if let Err(e) = servers.init(&inits, *compression) {
                registry.rollback(mark);
                return Err(e);
            }
            for (id, _, dst) in inits {
                entries.insert(id, Entry::new(dst));
            }
            return Ok(());
        }
        for (id, value) in plan {
            if let Some(dst) = stored.remove(&id) {
                crate::backend::for_context(STORE_CONTEXT).copy_any(&value, &dst, 0);
                placement.init_key(id, dst.size() as u64);
                entries.insert(id, Entry::new(dst));
            }
        }
        Ok(())
    }

    /// Sums the values of each key and applies the updater, or stores the sum.
    pub fn push(&self, keys: Keys, values: impl Into<Vec<NDArray>>, priority: i32) -> Result<()> {
        self.push_shared(keys, Arc::new(values.into()), priority)
    }

    /// [`KVStore::push`] of values already shared.
    pub fn push_shared(&self, keys: Keys, values: Arrays, priority: i32) -> Result<()> {
        let _trace = profiler::span(Class::Call, "push", || trace_args(&keys, &values));
        let servers = self.comm.servers("push")?;
        check_len(&keys, values.len())?;
        if servers.is_some() {
            self.comm.check_push_ready()?;
        }
        let calls = {
            let mut state = self.state.lock();
            let ids = state.keys.lookup(&keys)?;
            if self.is_nccl() {
                nccl::check_dense(&ids, &values, &Self::shown(&state.keys), "pushed value")?;
            }
            let plan = self.plan_push(&state, &ids, values)?;
            if let Some(servers) = servers {
                let jobs = remote_jobs(&state.entries, plan);
                state.keys.fix_type(&keys);
                servers.push(jobs, self.active_compression(&state), false, priority);
                return Ok(());
            }
            let devices = self.nccl_push(&state, &plan)?;
            let (calls, _) = self.schedule_push(&mut state, plan, priority, devices)?;
            state.keys.fix_type(&keys);
            calls
        };
        self.call_updaters(calls);
        Ok(())
    }

    /// The planner's checks of a push, with the comm's rules and the compression's.
    fn plan_push(&self, state: &State, ids: &[i32], values: Arrays) -> Result<PushPlan> {
        let shown = Self::shown(&state.keys);
        let plan = plan::plan_push(&state.entries, ids, &shown, values)?;
        plan::check_push_rules(&self.comm.rules(), &state.entries, &plan, &shown)?;
        plan::check_compressible(self.active_compression(state), &state.entries, &plan, &shown)?;
        Ok(plan)
    }

    /// The planner's checks of a pull, with the comm's rules.
    fn plan_pull(&self, state: &State, ids: &[i32], outs: Arrays, ignore_sparse: bool) -> Result<plan::PullPlan> {
        let shown = Self::shown(&state.keys);
        let rules = self.comm.rules();
        crate::ensure!(ignore_sparse || !rules.pull_ignores_sparse, "dist kvstore pull doesn't support ignore_sparse=False");
        let entries = &state.entries;
        // Each loop over the keys guesses the place after its previous key's (`find_near`).
        let (looked_up, looked_ahead) = (Cell::new(0u32), Cell::new(0u32));
        let near = |id: i32, guess: &Cell<u32>| {
            let found = entries.find_near(&id, guess.get());
            guess.set(found.map_or(0, |(place, _)| place.wrapping_add(1)));
            found.map(|(_, e)| e)
        };
        let lookup = |id| near(id, &looked_up).map(|e| e.stored.clone());
        let ahead = |id| near(id, &looked_ahead).iter().for_each(|e| e.stored.prefetch_clone());
        let copies = plan::plan_pull(&lookup, &ahead, ids, &shown, outs, ignore_sparse)?;
        plan::check_pull_rules(&rules, &copies, &shown)?;
        Ok(copies)
    }

    /// Copies the stored values into `outs`; sparse outputs are skipped when `ignore_sparse`.
    pub fn pull(&self, keys: Keys, outs: impl Into<Vec<NDArray>>, priority: i32, ignore_sparse: bool) -> Result<()> {
        self.pull_shared(keys, Arc::new(outs.into()), priority, ignore_sparse)
    }

    /// [`KVStore::pull`] into outputs already shared.
    pub fn pull_shared(&self, keys: Keys, outs: Arrays, priority: i32, ignore_sparse: bool) -> Result<()> {
        let _trace = profiler::span(Class::Call, "pull", || trace_args(&keys, &outs));
        let servers = self.comm.servers("pull")?;
        check_len(&keys, outs.len())?;
        let mut state = self.state.lock();
        let ids = state.keys.lookup(&keys)?;
        if self.is_nccl() {
            nccl::check_ignore_sparse(ignore_sparse)?;
            nccl::check_dense(&ids, &outs, &Self::shown(&state.keys), "output")?;
        }
        let copies = self.plan_pull(&state, &ids, outs, ignore_sparse)?;
        if self.is_nccl() {
            nccl::check_pull(state.nccl.as_ref(), &copies, &Self::shown(&state.keys))?;
        }
        state.keys.fix_type(&keys);
        let mut copies = copies;
        match servers {
            Some(servers) => {
                for (id, copy) in copies.ids.iter().zip(&copies.copies) {
                    servers.fetch(*id, &copy.src, priority);
                }
            }
            None => fusion::join(&state.entries, &mut copies),
        }
        batch::copies(copies.outs, copies.copies, priority);
        Ok(())
    }

    /// Pushes every value, then pulls every output: all pushes read their inputs before any
    /// pull writes, so in-place use (`outs` = `values`) works.
    pub fn push_pull(
        &self,
        vkeys: Keys,
        values: impl Into<Vec<NDArray>>,
        okeys: Keys,
        outs: impl Into<Vec<NDArray>>,
        priority: i32,
    ) -> Result<()> {
        self.push_pull_shared(vkeys, Arc::new(values.into()), okeys, Arc::new(outs.into()), priority)
    }

    /// [`KVStore::push_pull`] of values and into outputs already shared.
    pub fn push_pull_shared(&self, vkeys: Keys, values: Arrays, okeys: Keys, outs: Arrays, priority: i32) -> Result<()> {
        let _trace = profiler::span(Class::Call, "pushpull", || trace_args(&vkeys, &values));
        let servers = self.comm.servers("push-pull")?;
        check_len(&vkeys, values.len())?;
        check_len(&okeys, outs.len())?;
        if servers.is_some() {
            self.comm.check_push_ready()?;
        }
        let rules = self.comm.rules();
        let (calls, copies) = {
            let mut state = self.state.lock();
            let vids = state.keys.lookup(&vkeys)?;
            let oids = state.keys.lookup(&okeys)?;
            crate::ensure!(
                !rules.push_pull_same_keys || self.active_compression(&state).is_none(),
                "Compression not supported with PushPull"
            );
            if self.is_nccl() {
                let shown = Self::shown(&state.keys);
                nccl::check_dense(&vids, &values, &shown, "pushed value")?;
                nccl::check_dense(&oids, &outs, &shown, "output")?;
            }
            let plan = self.plan_push(&state, &vids, values)?;
            let copies = self.plan_pull(&state, &oids, outs, true)?;
            plan::check_push_pull_rules(&rules, &state.entries, &plan, &copies, &Self::shown(&state.keys))?;
            if let Some(servers) = servers {
                // Each key's updated value comes back with the push's answers into its buffer.
                let jobs = remote_jobs(&state.entries, plan);
                state.keys.fix_type(&vkeys);
                state.keys.fix_type(&okeys);
                servers.push(jobs, None, true, priority);
                drop(state);
                batch::copies(copies.outs, copies.copies, priority);
                return Ok(());
            }
            // The pull is checked against the set as the push leaves it (MXNet pushes, then
            // pulls).
            let devices = self.nccl_push(&state, &plan)?;
            if let Some(set) = &devices {
                nccl::check_pull(set.as_ref(), &copies, &Self::shown(&state.keys))?;
            }
            let (calls, replaced) = self.schedule_push(&mut state, plan, priority, devices)?;
            state.keys.fix_type(&vkeys);
            state.keys.fix_type(&okeys);
            let mut copies = copies;
            if replaced {
                plan::read_stored_after_push(&state.entries, &mut copies);
            }
            fusion::join(&state.entries, &mut copies);
            (calls, copies)
        };
        self.call_updaters(calls);
        batch::copies(copies.outs, copies.copies, priority);
        Ok(())
    }

    /// Initialises `vkeys` with `values`, then pulls `okeys` into `outs`.
    pub fn broadcast(
        &self,
        vkeys: Keys,
        values: &[NDArray],
        okeys: Keys,
        outs: impl Into<Vec<NDArray>>,
        priority: i32,
    ) -> Result<()> {
        let outs = Arc::new(outs.into());
        let _trace = profiler::span(Class::Call, "broadcast", || trace_args(&vkeys, values));
        let servers = self.comm.servers("broadcast")?;
        check_len(&vkeys, values.len())?;
        check_len(&okeys, outs.len())?;
        let rules = self.comm.rules();
        let mut state = self.state.lock();
        let nccl = self.is_nccl();
        let State { keys: registry, entries, placement, nccl: devices, compression, .. } = &mut *state;
        let mark = registry.mark();
        let made = registry.register(&vkeys).and_then(|vids| {
            let oids = registry.lookup(&okeys)?;
            let shown = Self::shown(registry);
            if nccl {
                nccl::check_dense(&vids, values, &shown, "value to initialise")?;
                nccl::check_dense(&oids, &outs, &shown, "output")?;
            }
            let inits = plan::plan_init(entries, &vids, &shown, values)?;
            plan::check_init_rules(&rules, &inits, &shown)?;
            // Made before anything changes; stored with the value's storage type, as Init does.
            let stored = plan::new_stored_values(&inits, STORE_CONTEXT)?;
            let lookup = |id: i32| stored.get(&id).cloned().or_else(|| entries.get(&id).map(|e| e.stored.clone()));
            let copies = plan::plan_pull(&lookup, &|_| (), &oids, &shown, outs, true)?;
            plan::check_pull_rules(&rules, &copies, &shown)?;
            if nccl {
                nccl::check_pull(devices.as_ref(), &copies, &shown)?;
            }
            entries.try_reserve(inits.len()).map_err(|_| crate::Error::out_of_memory("the store's key table"))?;
            Ok((inits, stored, copies))
        });
        let (inits, stored, copies) = match made {
            Ok(made) => made,
            Err(e) => {
                registry.rollback(mark);
                return Err(e);
            }
        };
        if let Some(servers) = servers {
            let sent: Vec<(i32, NDArray, NDArray)> = inits.iter().filter_map(|(id, v)| stored.get(id).map(|s| (*id, v.clone(), s.clone()))).collect();
            if let Err(e) = servers.init(&sent, *compression) {
                registry.rollback(mark);
                return Err(e);
            }
            registry.fix_type(&okeys);
            for (id, _, dst) in sent {
                entries.insert(id, Entry::new(dst));
            }
            for (id, copy) in copies.ids.iter().zip(&copies.copies) {
                servers.fetch(*id, &copy.src, priority);
            }
            drop(state);
            batch::copies(copies.outs, copies.copies, priority);
            return Ok(());
        }
        registry.fix_type(&okeys);
        for (id, value) in &inits {
            if let Some(dst) = stored.get(id) {
                crate::backend::for_context(dst.ctx()).copy_any(value, dst, priority);
                placement.init_key(*id, dst.size() as u64);
                entries.insert(*id, Entry::new(dst.clone()));
            }
        }
        batch::copies(copies.outs, copies.copies, priority);
        Ok(())
    }

    /// Installs the updaters (`None` resets to assignment).
    pub fn set_updaters(&self, updaters: Updaters) {
        self.comm.set_updaters(&updaters);
        *self.updaters.write() = updaters;
    }

    /// Whether each updater call first waits until its sum is ready and the stored value is
    /// free (the default: a C updater reads and writes raw data). Hosted mode turns it off:
    /// its updaters queue the host's ops, ordered after the store's by an engine handover.
    pub fn set_updaters_wait(&self, wait: bool) {
        self.updaters_wait.store(wait, std::sync::atomic::Ordering::Relaxed);
    }

    /// Installs only the int updater, keeping a string updater set earlier (as MXNet does).
    pub fn set_int_updater(&self, updater: Option<IntUpdater>) {
        let mut updaters = self.updaters.write();
        updaters.int = updater;
        self.comm.set_updaters(&updaters);
    }

    /// Sets gradient compression (`2bit` as MXNet 1.9, `1bit` as MXNet 2.0). `device` and
    /// distributed stores apply it to every push from now on; `local` stores accept it and
    /// ignore it, as MXNet's CommCPU does.
    pub fn set_gradient_compression(&self, params: &[(String, String)]) -> Result<()> {
        if self.is_nccl() {
            return Err(nccl::no_compression());
        }
        let gc = GradientCompression::from_params(params)?;
        self.comm.set_compression(&gc)?;
        self.state.lock().compression = Some(gc);
        Ok(())
    }

    /// The compression a push applies: only `device` stores compress.
    fn active_compression(&self, state: &State) -> Option<GradientCompression> {
        state.compression.filter(|_| self.comm.applies_compression())
    }

    /// Pulls the rows `row_ids[i]` (any shape and dtype, unsorted, repeated) of each key into
    /// the row_sparse `outs[i]`: the output's rows are the sorted unique ids, absent rows zero
    /// (none at all from a stored value without rows, as in MXNet).
    pub fn pull_row_sparse(&self, keys: Keys, outs: &[NDArray], row_ids: &[NDArray], priority: i32) -> Result<()> {
        let _trace = profiler::span(Class::Call, "pull_row_sparse", || trace_args(&keys, outs));
        let servers = self.comm.servers("row_sparse pull")?;
        check_len(&keys, outs.len())?;
        check_len(&keys, row_ids.len())?;
        if self.is_nccl() {
            return Err(nccl::no_row_sparse_pull());
        }
        let mut state = self.state.lock();
        let ids = state.keys.lookup(&keys)?;
        let plan = {
            let shown = Self::shown(&state.keys);
            plan::check_row_sparse_pull_rules(&self.comm.rules(), &ids, &shown)?;
            plan::plan_row_sparse_pull(&state.entries, &ids, &shown, outs, row_ids)?
        };
        state.keys.fix_type(&keys);
        for ((stored, out, row_ids), id) in plan.into_iter().zip(ids) {
            if let Some(servers) = servers {
                // The wanted rows come into the key's buffer, which then holds exactly them.
                servers.fetch_rows(id, &stored, &row_ids.readable_on_host()?, priority)?;
            }
            crate::backend::for_context(out.ctx()).row_sparse_pull(RowSparsePull { stored, out, row_ids }, priority);
        }
        Ok(())
    }

    /// Records whether freeing a distributed store waits at a barrier (no effect locally).
    pub fn set_barrier_before_exit(&self, barrier: bool) {
        self.comm.set_barrier_before_exit(barrier);
    }

    /// Rank of this process in its group: 0 for local stores.
    pub fn rank(&self) -> i32 {
        self.comm.rank()
    }

    /// Number of workers: 1 for local stores.
    pub fn group_size(&self) -> i32 {
        self.comm.group_size()
    }

    /// Refuses a push that the distributed store would refuse whatever its values
    /// (`dist_async` without an updater on every server); `Ok` for local stores.
    pub fn check_push_ready(&self) -> Result<()> {
        self.comm.servers("push")?;
        self.comm.check_push_ready()
    }

    /// Waits until every worker has reached the barrier (at once for local stores).
    pub fn barrier(&self) -> Result<()> {
        self.comm.barrier()
    }

    /// The number of dead nodes (0 for local stores).
    pub fn num_dead_nodes(&self, node_id: i32, timeout_sec: i32) -> Result<i32> {
        self.comm.num_dead_nodes(node_id, timeout_sec)
    }

    /// Runs a server until worker 0 stops it: returns at once for local stores.
    pub fn run_server(&self, controller: Option<dist::Controller>) -> Result<()> {
        self.comm.run_server(controller)
    }

    /// Sends a command to the servers: nothing to do for local stores.
    pub fn send_command(&self, id: i32, body: &[u8]) -> Result<()> {
        self.comm.send_command(id, body)
    }

    /// Schedules the sums of a checked push; returns the updater calls to make, if any, and
    /// whether a key got a new stored value (another storage type or GPU).
    /// Everything the push allocates (replaced stored values, merge buffers, residuals) is
    /// made before any entry changes: a push that fails changes nothing. `nccl_devices` is an
    /// `nccl` store's device set after the push (its root holds every sum of several values),
    /// stored once nothing can fail.
    fn schedule_push(
        &self,
        state: &mut State,
        plan: PushPlan,
        priority: i32,
        nccl_devices: Option<Option<nccl::DeviceSet>>,
    ) -> Result<(Vec<UpdaterCall>, bool)> {
        let updaters = self.updaters.read().clone();
        let string_keys = state.keys.key_type() == Some(KeyType::Str);
        let compression = self.active_compression(state);
        let with_updater = updaters.active(string_keys);
        let PushPlan { values, groups } = plan;
        let mut prepared = Vec::new();
        prepared.try_reserve_exact(groups.len()).map_err(|_| crate::Error::out_of_memory("a push's plan"))?;
        let kind = self.kind();
        let nccl_root = nccl_devices.as_ref().and_then(|d| d.as_ref().map(nccl::DeviceSet::root));
        for g in &groups {
            let vals = &values[g.values.clone()];
            let entry = state.entries.at_mut(g.place).ok_or_else(|| plan::not_inited(&g.id.to_string()))?;
            let merge_gpu = match kind {
                // Every sum of several values lands on the set's root, the keys initialised
                // after the set was fixed too (MXNet has no buffer for those).
                StoreKind::Nccl => nccl_root.filter(|_| vals.len() > 1),
                _ => devices::merge_gpu(&mut state.placement, kind, g.id, vals, compression.is_some(), &mut entry.merge_home),
            };
            let merge_ctx = merge_gpu.unwrap_or(STORE_CONTEXT);
            let entry = &*entry;
            // Where the sum goes: the stored value, or (with an updater) the value handed to
            // it — MXNet hands over a single uncompressed value as it is.
            // As MXNet's CommCPU: the first value's storage type is the sum's.
            let sparse_sum = vals.first().is_some_and(|v| v.stype() == StorageType::RowSparse);
            let (shape, dtype) = (entry.stored.shape(), entry.stored.dtype());
            let (mut replaces, mut takes_merge, mut is_merge) = (false, false, false);
            let dst = match (with_updater, vals.len(), compression) {
                (false, _, _) => {
                    // As MXNet: a sum of another storage type than the stored value's replaces
                    // it with one of the sum's type (a dense key pushed row_sparse values
                    // becomes row_sparse).
                    // With values on GPUs the sum stays on its merge GPU and becomes the stored
                    // value there, as MXNet's `local = merged` (row_sparse sums too).
                    let want = if sparse_sum { StorageType::RowSparse } else { StorageType::Default };
                    let moves = merge_gpu.is_some_and(|gpu| entry.stored.ctx() != gpu);
                    if entry.stored.stype() != want || moves {
                        replaces = true;
                        Dst::Made(Box::new(match want {
                            StorageType::RowSparse => NDArray::empty_row_sparse(shape, merge_ctx, dtype)?,
                            _ => NDArray::zeros(shape, merge_ctx, dtype)?,
                        }))
                    } else {
                        Dst::Stored
                    }
                }
                (true, 1, None) => Dst::FirstValue,
                (true, _, _) if sparse_sum => Dst::Made(Box::new(NDArray::empty_row_sparse(shape, STORE_CONTEXT, dtype)?)),
                (true, _, _) => {
                    // The key's own buffer, taken out below until its updater call is done (a
                    // concurrent push finding it taken sums into a new one, which becomes the
                    // key's if it has none when the call is done).
                    is_merge = true;
                    Dst::Made(Box::new(match &entry.merge {
                        Some(merge) if merge.ctx() == merge_ctx => {
                            takes_merge = true;
                            merge.clone()
                        }
                        _ => NDArray::zeros(shape, merge_ctx, dtype)?,
                    }))
                }
            };
            // New positions start at zero (MXNet would overrun its buffers).
            let mut new_residuals = Vec::new();
            if compression.is_some() {
                for v in &vals[entry.residuals.len().min(vals.len())..] {
                    // On the value's GPU, as MXNet keeps them (quantised there).
                    new_residuals.push(NDArray::zeros(shape, devices::residual_home(v), dtype)?);
                }
            }
            // An updater's stored value goes to the sum's GPU (MXNet: `local.Copy(merged.ctx())`).
            let moved = match with_updater.then(|| dst.peek(entry, vals).and_then(|d| devices::stored_home(&entry.stored, d))).flatten() {
                Some(gpu) => Some(NDArray::zeros(shape, gpu, dtype)?),
                None => None,
            };
            let made = (!new_residuals.is_empty() || moved.is_some()).then(|| Box::new(Made { new_residuals, moved }));
            prepared.push(Prepared { dst, replaces, takes_merge, is_merge, made });
        }
        if let Some(devices) = nccl_devices {
            state.nccl = devices;
        }
        // Sized up front: a first push would grow `calls` to 4 calls, over 1 KiB, a size glibc's
        // malloc serves only after consolidating its fast bins (costly in a host process).
        let calls_len = if with_updater { groups.len() } else { 0 };
        let (mut compressed, mut calls) = (Vec::new(), Vec::with_capacity(calls_len));
        let mut sums = batch::SumBatches::new(self.sum_order(), values, priority, groups.len());
        let (mut tails, mut jobs, mut replaced) = (Vec::new(), 0, false);
        for (i, (g, p)) in groups.iter().zip(prepared).enumerate() {
            // Most pushes clone the stored value (see `plan::plan_pull`).
            if let Some(next) = groups.get(i + plan::STORED_AHEAD).and_then(|n| state.entries.at(n.place)) {
                next.stored.prefetch_clone();
            }
            let Some(entry) = state.entries.at_mut(g.place) else { continue };
            let Prepared { dst, replaces, takes_merge, is_merge, made } = p;
            let dst = match dst {
                Dst::Stored => entry.stored.clone(),
                Dst::FirstValue => sums.values()[g.values.start].clone(),
                Dst::Made(new) => *new,
            };
            if replaces {
                entry.stored = dst.clone();
            }
            let Made { new_residuals, moved } = made.map_or_else(Made::default, |m| *m);
            replaced |= replaces || moved.is_some();
            if let Some(new) = moved {
                crate::backend::for_context(new.ctx()).copy_any(&entry.stored, &new, priority);
                entry.stored = new;
            }
            if takes_merge {
                entry.merge = None;
            }
            entry.joinable = None;
            let merge = is_merge.then(|| dst.clone());
            entry.residuals.extend(new_residuals);
            // Only an updater needs the sum's destination after the job (refcounts are shared
            // with the workers: no clone without a use).
            let recv = with_updater.then(|| dst.clone());
            let n = g.values.len();
            match compression {
                Some(gc) => {
                    let residuals = entry.residuals[..n].to_vec();
                    compressed.push(CompressedSumJob { values: sums.values()[g.values.clone()].to_vec(), residuals, dst, compression: gc });
                }
                None if !(with_updater && n == 1) => {
                    // A pull reads a sum into the stored value only.
                    let tail = (!with_updater).then(|| fusion::tail_for(&sums.values()[g.values.clone()], &dst)).flatten();
                    if let Some(tail) = &tail {
                        tails.push((jobs, g.place, Arc::clone(tail)));
                    }
                    sums.add(SumJob { values: g.values.clone(), dst, tail });
                    jobs += 1;
                }
                None => {}
            }
            if let Some(recv) = recv {
                let key = updaters.key_for(g.id, state.keys.name(g.id).filter(|_| string_keys));
                calls.push(UpdaterCall { id: g.id, key, recv, local: entry.stored.clone(), updaters: updaters.clone(), merge });
            }
        }
        let tickets = sums.finish();
        for (job, place, tail) in tails {
            if let (Some(Some(ticket)), Some(entry)) = (tickets.get(job), state.entries.at_mut(place)) {
                entry.joinable = Some(fusion::Joinable::new(ticket.clone(), tail));
            }
        }
        batch::compressed_sums(compressed, priority);
        Ok((calls, replaced))
    }

    /// Calls the updaters on the calling thread, with no store lock held: an updater may call
    /// back into the library, this store or another. Calls for one key take turns (see
    /// [`turns`]), so a C updater's read-modify-write loses nothing. Each waits until its
    /// inputs are ready, so it may read raw data. When the sum failed, the updater is not
    /// called and the failure moves to the stored value, where the next pull's wait reports it
    /// (MXNet's updater ops would read the failed sum and pass its failure on to the stored
    /// value). A merge buffer goes back to its key once its updater has returned.
    fn call_updaters(&self, calls: Vec<UpdaterCall>) {
        for c in calls {
            let _trace = profiler::span(Class::Call, "update", || vec![("bytes", Arg::Int(c.recv.data_byte_len() as i64))]);
            let turn = turns::take((self as *const KVStore as usize, c.id));
            let waited = match self.updaters_wait.load(std::sync::atomic::Ordering::Relaxed) {
                true => c.recv.wait_to_read().and_then(|()| c.local.wait_to_write()),
                false => Ok(()),
            };
            if let Err(failure) = waited {
                crate::engine::engine().push(&[], &[c.local.var()], 0, move |_| Err(failure));
            } else {
                c.updaters.call(&c.key, c.recv, c.local);
            }
            drop(turn);
            if let Some(merge) = c.merge {
                if let Some(entry) = self.state.lock().entries.get_mut(&c.id) {
                    entry.merge.get_or_insert(merge);
                }
            }
        }
    }
}

/// What one key of a push needs, made before anything changes. Kept small and cloning
/// nothing the second pass can clone itself: a call of thousands of keys holds one per key.
struct Prepared {
    /// Where its sum goes.
    dst: Dst,
    /// Whether `dst` (made) becomes the stored value: the sum's storage type or GPU differs
    /// from the stored one's.
    replaces: bool,
    /// Whether `dst` is the key's merge buffer, taken out of the entry for the updater call.
    takes_merge: bool,
    /// Whether `dst` is a merge buffer (the key's or a new one), given back after the call.
    is_merge: bool,
    /// Arrays made for compression or an updater, where there are any.
    made: Option<Box<Made>>,
}

// A call of thousands of keys holds one `Prepared` per key: kept to half a cache line.
const _: () = assert!(std::mem::size_of::<Prepared>() <= 32);

/// Where a push's sum goes.
enum Dst {
    /// The stored value.
    Stored,
    /// The key's only pushed value, handed to its updater as it is.
    FirstValue,
    /// An array made (or a merge buffer taken) for it.
    Made(Box<NDArray>),
}

impl Dst {
    /// The array this names, for a look before the second pass.
    fn peek<'a>(&'a self, entry: &'a Entry, vals: &'a [NDArray]) -> Option<&'a NDArray> {
        match self {
            Dst::Stored => Some(&entry.stored),
            Dst::FirstValue => vals.first(),
            Dst::Made(new) => Some(new),
        }
    }
}

/// Arrays a push makes for a key besides its sum's destination.
#[derive(Default)]
struct Made {
    /// Residuals for value positions new to the key.
    new_residuals: Vec<NDArray>,
    /// The stored value's new home on the sum's GPU, for an updater.
    moved: Option<NDArray>,
}

struct UpdaterCall {
    id: i32,
    key: UpdaterKey,
    recv: NDArray,
    local: NDArray,
    updaters: Updaters,
    /// The key's merge buffer, to give back after the call.
    merge: Option<NDArray>,
}

/// What a profiled call shows: its first key, how many arrays (key-value pairs) it passes,
/// their bytes and the first array's context.
fn trace_args(keys: &Keys, arrays: &[NDArray]) -> profiler::Args {
    let key = match keys {
        Keys::Int(k) => k.first().map(|k| Arg::Int(*k as i64)),
        Keys::Str(k) => k.first().map(|k| Arg::Text((*k).to_string())),
    };
    let mut args = Vec::with_capacity(4);
    args.extend(key.map(|k| ("key", k)));
    args.push(("arrays", Arg::Int(arrays.len() as i64)));
    args.push(("bytes", Arg::Int(arrays.iter().map(|a| a.data_byte_len() as i64).sum())));
    args.extend(arrays.first().map(|a| ("context", Arg::Text(a.ctx().to_string()))));
    args
}

/// A checked push's values by key, with each key's buffer: what a distributed worker sends.
fn remote_jobs(entries: &Entries, plan: PushPlan) -> Vec<(i32, Vec<NDArray>, NDArray)> {
    let PushPlan { values, groups } = plan;
    groups
        .into_iter()
        .filter_map(|g| entries.at(g.place).map(|e| (g.id, values[g.values].to_vec(), e.stored.clone())))
        .collect()
}

fn check_len(keys: &Keys, n: usize) -> Result<()> {
    crate::ensure!(keys.len() == n, "{} keys but {} values", keys.len(), n);
    Ok(())
}

#[cfg(test)]
mod tests;
