//! Property tests of the rendezvous: a requester and a responder over a simulated network that
//! delivers control messages in any order and sometimes twice; values that change length; a
//! server that sometimes cannot serve. Every pull must end exactly once — with bytes the key
//! really held, or with the server's error — and nothing may stay allocated.

use super::*;
use crate::wire::{DType, Imm};
use proptest::prelude::*;
use std::collections::HashMap;

const SERVER: i32 = 8;
const WORKER: i32 = 9;

#[derive(Clone, Debug)]
enum Op {
    /// Start a pull of key k.
    Pull(u64),
    /// Push a new value of length `len` (filled with `fill`) for key k.
    Set(u64, u16, u8),
    /// Deliver the queued control message at this position (mod queue length).
    Deliver(usize),
    /// Deliver it and keep a copy queued (duplicate).
    Duplicate(usize),
    /// The server's handler stops / starts serving zero-copy pulls.
    Serving(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..4).prop_map(Op::Pull),
        2 => (0u64..4, 0u16..300, any::<u8>()).prop_map(|(k, l, f)| Op::Set(k, l, f)),
        6 => any::<usize>().prop_map(Op::Deliver),
        1 => any::<usize>().prop_map(Op::Duplicate),
        1 => any::<bool>().prop_map(Op::Serving),
    ]
}

#[derive(Debug)]
enum Wire {
    ToServer(RvMessage),
    ToWorker(RvMessage),
}

#[derive(Default)]
struct Sim {
    req: Requester,
    resp: Responder,
    store: HashMap<u64, Vec<u8>>,
    history: HashMap<u64, Vec<Vec<u8>>>,
    serving: bool,
    queue: Vec<Wire>,
    /// The requester's destinations.
    dest: Destinations,
    key_of: HashMap<u32, u64>,
    outcomes: HashMap<u32, Result<Vec<u8>, String>>,
    started: Vec<u32>,
    round_trips: u64,
}

/// The destination memory the simulated requester allocates.
#[derive(Default)]
struct Destinations {
    /// Destination memory by address.
    mem: HashMap<u64, Vec<u8>>,
    next_addr: u64,
    /// The destination allocated for each outstanding request (the driver's own table).
    alloc_of: HashMap<u32, Dest>,
}

impl Sim {
    fn new(validation: bool) -> Sim {
        Sim {
            req: Requester::new(validation),
            resp: Responder::new(DType::U8, validation),
            serving: true,
            dest: Destinations {
                next_addr: 4096,
                ..Destinations::default()
            },
            ..Sim::default()
        }
    }

    fn run_req(&mut self, actions: Vec<ReqAction>) {
        for a in actions {
            match a {
                ReqAction::Allocate { index, bytes } => {
                    // Reuse the request's destination when it is big enough, else replace it.
                    let dest = match self.dest.alloc_of.get(&index).copied() {
                        Some(d) if d.capacity >= bytes => d,
                        old => {
                            if let Some(d) = old {
                                self.dest.mem.remove(&d.addr);
                            }
                            let addr = self.dest.next_addr;
                            self.dest.next_addr += bytes + 64;
                            self.dest.mem.insert(addr, vec![0; bytes as usize]);
                            Dest {
                                addr,
                                rkey: 7,
                                capacity: bytes,
                            }
                        }
                    };
                    self.dest.alloc_of.insert(index, dest);
                    let more = self.req.allocated(index, dest);
                    self.run_req(more);
                }
                ReqAction::Send { to, msg } => {
                    assert_eq!(to, SERVER);
                    self.queue.push(Wire::ToServer(msg));
                }
                ReqAction::Complete { index, meta } => {
                    let dest = self
                        .dest
                        .alloc_of
                        .remove(&index)
                        .expect("completed request had a destination");
                    let mut bytes = self.dest.mem.remove(&dest.addr).expect("memory");
                    bytes.truncate(meta.bytes as usize);
                    assert!(
                        self.outcomes.insert(index, Ok(bytes)).is_none(),
                        "request {index} ended twice"
                    );
                }
                ReqAction::Fail { index, error } => {
                    if let Some(d) = self.dest.alloc_of.remove(&index) {
                        self.dest.mem.remove(&d.addr);
                    }
                    assert!(
                        self.outcomes.insert(index, Err(error)).is_none(),
                        "request {index} ended twice"
                    );
                }
            }
        }
    }

    fn lookup(store: &HashMap<u64, Vec<u8>>, k: u64) -> responder::Lookup<'_> {
        store
            .get(&k)
            .map(|v| (TensorMeta::of(DType::U8, v.len() as u64), v.as_slice()))
    }

    fn run_resp(&mut self, actions: Vec<RespAction>) {
        for a in actions {
            match a {
                RespAction::Send { to, msg } => {
                    assert_eq!(to, WORKER);
                    self.queue.push(Wire::ToWorker(msg));
                }
                RespAction::WriteStored { key, addr, imm, .. } => {
                    let data = self.store[&key].clone();
                    self.write(addr, imm, &data);
                }
                RespAction::WriteClone {
                    data, addr, imm, ..
                } => self.write(addr, imm, &data),
            }
        }
    }

    /// An RDMA write: lands in memory (if the address is still allocated), then the immediate.
    fn write(&mut self, addr: u64, imm: u32, data: &[u8]) {
        if let Some(m) = self.dest.mem.get_mut(&addr) {
            assert!(
                data.len() <= m.len(),
                "write of {} bytes overflows a {}-byte destination",
                data.len(),
                m.len()
            );
            m[..data.len()].copy_from_slice(data);
        }
        let crc = Some(crate::wire::crc32c(&[data]));
        let actions = self.req.on_write(SERVER, imm, data.len() as u64, crc);
        self.run_req(actions);
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Pull(k) => {
                let (index, actions) = self.req.start(SERVER, k, 0, DType::U8);
                self.key_of.insert(index, k);
                self.started.push(index);
                self.run_req(actions);
            }
            Op::Set(k, len, fill) => {
                let v: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                self.history.entry(k).or_default().push(v.clone());
                self.store.insert(k, v);
                let store = std::mem::take(&mut self.store);
                let actions = self.resp.on_value_ready(k, |key| Sim::lookup(&store, key));
                self.store = store;
                self.run_resp(actions);
            }
            Op::Deliver(i) | Op::Duplicate(i) if !self.queue.is_empty() => {
                let i = i % self.queue.len();
                let w = if matches!(op, Op::Duplicate(_)) {
                    match &self.queue[i] {
                        Wire::ToServer(m) => Wire::ToServer(m.clone()),
                        Wire::ToWorker(m) => Wire::ToWorker(m.clone()),
                    }
                } else {
                    self.queue.remove(i)
                };
                self.deliver(w);
            }
            Op::Serving(s) => self.serving = s,
            _ => {}
        }
    }

    fn deliver(&mut self, w: Wire) {
        match w {
            Wire::ToServer(m) => {
                let store = std::mem::take(&mut self.store);
                let actions = self
                    .resp
                    .on_message(WORKER, m, self.serving, |key| Sim::lookup(&store, key));
                self.store = store;
                self.run_resp(actions);
            }
            Wire::ToWorker(m) => {
                if matches!(m, RvMessage::MetaDataResponse { .. }) && self.req.outstanding() > 0 {
                    self.round_trips += 1;
                }
                let actions = self.req.on_message(SERVER, m);
                self.run_req(actions);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_pull_ends_once_with_true_bytes_or_the_servers_error(
        ops in proptest::collection::vec(op(), 1..120),
        validation in any::<bool>(),
    ) {
        let mut sim = Sim::new(validation);
        for op in ops {
            sim.step(op);
        }
        // Quiesce: the server serves again, every key gets a value, every message is delivered.
        sim.serving = true;
        for k in 0..4 {
            if !sim.store.contains_key(&k) {
                sim.step(Op::Set(k, 5, 1));
            }
        }
        while !sim.queue.is_empty() {
            sim.step(Op::Deliver(0));
        }
        prop_assert_eq!(sim.req.outstanding(), 0, "request indices leaked");
        prop_assert_eq!(sim.resp.waiting(), (0, 0), "responder kept requests or clones");
        prop_assert!(sim.dest.mem.is_empty(), "destinations leaked: {}", sim.dest.mem.len());
        for index in &sim.started {
            let key = sim.key_of[index];
            match sim.outcomes.get(index) {
                Some(Ok(bytes)) => {
                    let versions = &sim.history[&key];
                    prop_assert!(versions.contains(bytes), "key {} came back with bytes it never held", key);
                }
                Some(Err(e)) => prop_assert!(e.contains("does not serve zero-copy pulls"), "unexpected error {}", e),
                None => prop_assert!(false, "request {} never ended", index),
            }
        }
    }

    #[test]
    fn steady_state_needs_no_meta_data_round_trip(len in 1u16..500, pulls in 2usize..20) {
        let mut sim = Sim::new(false);
        sim.step(Op::Set(1, len, 3));
        for i in 0..pulls {
            let before = sim.round_trips;
            sim.step(Op::Pull(1));
            while !sim.queue.is_empty() {
                sim.step(Op::Deliver(0));
            }
            let expected = if i == 0 { 1 } else { 0 };
            prop_assert_eq!(sim.round_trips - before, expected);
        }
        // A length change costs exactly one more round trip, then none.
        sim.step(Op::Set(1, len + 7, 9));
        for i in 0..3 {
            let before = sim.round_trips;
            sim.step(Op::Pull(1));
            while !sim.queue.is_empty() {
                sim.step(Op::Deliver(0));
            }
            prop_assert_eq!(sim.round_trips - before, if i == 0 { 1 } else { 0 });
        }
        prop_assert_eq!(sim.req.round_trips(SERVER, 1), 2);
        for o in sim.outcomes.values() {
            prop_assert!(o.is_ok());
        }
    }
}

#[test]
fn reserved_immediates_are_never_request_indices() {
    let mut r = Requester::new(false);
    r.next = Imm::ACK.0 - 1;
    let (a, _) = r.start(SERVER, 1, 0, DType::U8);
    let (b, _) = r.start(SERVER, 2, 0, DType::U8);
    assert_eq!(a, Imm::ACK.0 - 1);
    assert_eq!(b, 0, "wraps past 0xFFFFFFFE and 0xFFFFFFFF");
    let (c, _) = r.start(SERVER, 3, 0, DType::U8);
    assert_eq!(c, 1);
}

#[test]
fn slotted_indices_keep_their_slot_and_skip_the_reserved_slot() {
    let mut r = Requester::with_slot(false, 3);
    r.next = 0x00FF_FFFF;
    let (a, _) = r.start(SERVER, 1, 0, DType::U8);
    let (b, _) = r.start(SERVER, 2, 0, DType::U8);
    assert_eq!((a, b), (0x03FF_FFFF, 0x0300_0000), "wraps within the slot");
    let mut last = Requester::with_slot(false, 255);
    let (c, _) = last.start(SERVER, 1, 0, DType::U8);
    assert_eq!(
        c >> 24,
        254,
        "slot 255 would collide with the reserved immediates"
    );
}

#[test]
fn clones_whose_re_request_never_comes_expire() {
    let mut resp = Responder::new(DType::U8, false);
    let mut store: HashMap<u64, Vec<u8>> = HashMap::new();
    store.insert(1, vec![7; 10]);
    let req = |i: u32| RvMessage::TensorRequest {
        key: 1,
        step: 0,
        request_index: i,
        remote_addr: 0,
        rkey: 0,
        dtype: DType::U8,
        cached: None,
    };
    resp.on_message(WORKER, req(0), true, |k| Sim::lookup(&store, k));
    assert_eq!(resp.waiting(), (0, 1));
    assert_eq!(resp.expire(3), 0, "young clones stay");
    for i in 1..=4 {
        resp.on_message(WORKER, req(i), true, |k| Sim::lookup(&store, k));
    }
    assert_eq!(resp.expire(3), 1, "the first clone saw 4 later responses");
    assert_eq!(resp.waiting(), (0, 4));
}

#[test]
fn dtype_mismatch_is_refused_with_error_status() {
    let mut resp = Responder::new(DType::F32, false);
    let store: HashMap<u64, Vec<u8>> = HashMap::new();
    let out = resp.on_message(
        WORKER,
        RvMessage::TensorRequest {
            key: 4,
            step: 0,
            request_index: 3,
            remote_addr: 0,
            rkey: 0,
            dtype: DType::F64,
            cached: None,
        },
        true,
        |k| Sim::lookup(&store, k),
    );
    assert_eq!(
        out,
        vec![RespAction::Send {
            to: WORKER,
            msg: RvMessage::ErrorStatus {
                key: 4,
                step: 0,
                request_index: 3,
                code: ERR_DTYPE,
                message: "key 4 holds f32 values, requested as f64".into()
            }
        }]
    );
}

#[test]
fn validation_catches_a_corrupted_write() {
    let mut req = Requester::new(true);
    let (i, a) = req.start(SERVER, 1, 0, DType::U8);
    assert!(matches!(a[0], ReqAction::Send { .. }));
    let a = req.on_message(
        SERVER,
        RvMessage::MetaDataResponse {
            request_index: i,
            meta: TensorMeta::of(DType::U8, 3),
            checksum: Some(crate::wire::crc32c(&[b"abc"])),
        },
    );
    assert_eq!(a, vec![ReqAction::Allocate { index: i, bytes: 3 }]);
    req.allocated(
        i,
        Dest {
            addr: 1,
            rkey: 1,
            capacity: 3,
        },
    );
    let a = req.on_write(SERVER, i, 3, Some(crate::wire::crc32c(&[b"abd"])));
    assert!(
        matches!(&a[0], ReqAction::Fail { error, .. } if error.starts_with("checksum mismatch for key 1")),
        "{a:?}"
    );
    assert_eq!(req.outstanding(), 0);
}
