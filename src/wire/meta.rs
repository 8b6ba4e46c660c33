//! The message header (ps-lite's `Meta`, `meta.proto`); control messages are in
//! [`super::control`].

use serde::{Deserialize, Serialize};
use std::fmt;

use super::control::{Command, ControlMsg};
use super::ids::NodeId;

/// The role of a process in the cluster (`DMLC_ROLE`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Role {
    /// Assigns ids, runs barriers; carries no key-value traffic.
    #[default]
    Scheduler,
    /// Holds a key range; answers pushes and pulls.
    Server,
    /// Issues pushes and pulls.
    Worker,
}

impl Role {
    /// The group id of this role: scheduler 1, server 2, worker 4.
    pub fn group(self) -> i32 {
        match self {
            Role::Scheduler => 1,
            Role::Server => 2,
            Role::Worker => 4,
        }
    }

    /// Lower-case name as in `DMLC_ROLE`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Scheduler => "scheduler",
            Role::Server => "server",
            Role::Worker => "worker",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A node of the cluster as the scheduler's node table lists it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct Node {
    /// Its role.
    pub role: Role,
    /// Its id, or -1 before the scheduler assigned one.
    pub id: NodeId,
    /// Host (IPv4/IPv6 address or name) its van listens on.
    pub host: String,
    /// TCP port its van listens on.
    pub port: u16,
    /// The rank this node asks for (`PSLITE_RANK`); honoured when every node of its role asks
    /// for a distinct rank in range, else ranks follow the order of registration.
    pub requested_rank: Option<u32>,
}

/// Element type of the values frame.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default,
)]
pub enum DType {
    /// No values (control messages).
    #[default]
    None,
    /// `f32`, 4 bytes.
    F32,
    /// `f64`, 8 bytes.
    F64,
    /// `i32`, 4 bytes.
    I32,
    /// `i64`, 8 bytes.
    I64,
    /// `u8`, 1 byte.
    U8,
    /// `u32`, 4 bytes.
    U32,
    /// `u64`, 8 bytes.
    U64,
}

impl DType {
    /// The seven value types, in the order of the enum.
    pub const VALUES: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::U64,
    ];

    /// Size of one element in bytes (0 for `None`).
    pub fn size(self) -> usize {
        match self {
            DType::None => 0,
            DType::U8 => 1,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Lower-case name: "f32", "u8", …
    pub fn name(self) -> &'static str {
        match self {
            DType::None => "none",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Key caching (see `crate::kv::keycache`): how a key-value message refers to its key list.
/// Absent, frame 0 carries the keys as in ps-lite.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum KeyRef {
    /// Request: frame 0 carries the keys; the server keeps them under `digest` for this worker
    /// (replacing a list kept under the same digest), after forgetting the lists `evict`.
    Register {
        /// 64-bit digest of the key bytes (xxh3).
        digest: u64,
        /// Digests of lists the worker no longer expects the server to keep.
        evict: Vec<u64>,
    },
    /// Request: frame 0 is empty; the keys are the list the server keeps under `digest`.
    Cached {
        /// Digest of a list registered earlier by the same worker.
        digest: u64,
    },
    /// Answer: the request named a list the server does not keep; nothing was applied, and the
    /// worker sends the request again with its keys.
    Unknown {
        /// The digest the server does not know.
        digest: u64,
    },
    /// Answer: frame 0 is empty; the answer's keys are the request's keys, in order.
    AsRequested,
}

/// How a message takes part in the zero-copy rendezvous (TF contrib/verbs; see
/// `crate::rendezvous`), if it does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// Frame 0 is an encoded rendezvous message (TENSOR_REQUEST, META_DATA_RESPONSE,
    /// TENSOR_RE_REQUEST, ERROR_STATUS).
    Control,
    /// A content write sent as a message, because the van cannot write to the receiver (the
    /// ZMQ van): frame 0 is the content, `imm` the immediate the write would have carried.
    Write {
        /// The write's immediate (the request index).
        imm: u32,
    },
}

/// Which request of which customer a message is, or answers: an answer echoes its request's
/// tag, and a `KVWorker` matches answers by it (ps-lite's `app_id`, `customer_id` and
/// `timestamp`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RequestTag {
    /// Application id: which `KVWorker`/`KVServer` pair the message belongs to.
    pub app_id: i32,
    /// Customer id within the application (the worker-side object that waits for answers).
    pub customer_id: i32,
    /// Request timestamp, echoed by the answer.
    pub timestamp: i32,
}

/// The key-value part of a header: what a request asks for and how its frames are laid out.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct KvHeader {
    /// Push request (or its answer).
    pub push: bool,
    /// Pull request (or its answer); push + pull is ps-lite's `ZPushPull`.
    pub pull: bool,
    /// Element type of the values frame.
    pub dtype: DType,
    /// Key caching: how the keys frame refers to the key list; `None`: frame 0 holds the keys.
    pub keys: Option<KeyRef>,
    /// Where the request stands in the servers' key layout (elastic servers,
    /// [`crate::postoffice::ranges`]); `None` on messages that carry no keys.
    pub placement: Option<Placement>,
}

/// A key-value message's place in the servers' key layout, which changes as servers are added
/// and drained ([`crate::postoffice::ranges`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On a request (worker → server), echoed on its answer: the layout epoch the worker
    /// sliced it by, and its part's number among the request's parts (an answer names the part
    /// it settles; a part sent again after [`Placement::Moved`] gets a new number).
    Part {
        /// The worker's layout epoch.
        epoch: u64,
        /// The part's number within its request (timestamp).
        part: u32,
    },
    /// On an answer: part `part` was not applied, some of its keys are another server's from
    /// layout `epoch` on: slice them again by that layout and send them there.
    Moved {
        /// The part.
        part: u32,
        /// The epoch of the layout that places the keys elsewhere.
        epoch: u64,
    },
    /// On an answer: part `part` was not applied, this server is to own its keys but their
    /// rows have not arrived (or it has not learned the worker's layout yet): send it again
    /// shortly.
    NotYet {
        /// The part.
        part: u32,
    },
    /// Server → server: the rows of keys `[begin, end)` (`end` = `u64::MAX` includes it) for
    /// their new owner at layout `epoch`; frame 0 is the handler's export
    /// ([`crate::kv::server::RequestHandler::export_range`]), or empty with `Meta::error`
    /// saying why the rows could not be exported.
    Handoff {
        /// The epoch of the layout that gives the keys to the receiver.
        epoch: u64,
        /// First key.
        begin: u64,
        /// One past the last key.
        end: u64,
        /// This message's piece of the export (each within a server's frame bound).
        piece: u32,
        /// How many pieces the export was cut into.
        pieces: u32,
        /// How many key-value servers of the old owner hand their rows of this range over
        /// (one per application and value type): the new owner reports the range arrived once
        /// as many took theirs.
        of: u32,
    },
}

impl Placement {
    /// The part an answer settles (`None` for a handoff).
    pub fn part(self) -> Option<u32> {
        match self {
            Placement::Part { part, .. }
            | Placement::Moved { part, .. }
            | Placement::NotYet { part } => Some(part),
            Placement::Handoff { .. } => None,
        }
    }
}

/// What the layers below the application stamp on a message as it leaves: the postoffice its
/// resend number and the sender's incarnation, the codec the payload frames' lengths.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Stamp {
    /// Resend (`PS_RESEND`): the data message's sequence number from its sender to its
    /// receiver (see `crate::postoffice::resend`); `None` when resend is off.
    pub seq: Option<u64>,
    /// How many nodes held the sender's id before it: 0, or n for the n-th replacement of a
    /// lost node. A node told of a replacement drops what an earlier holder of the id still
    /// sends.
    pub incarnation: u32,
    /// Byte length of each payload frame that follows.
    pub frame_lens: Vec<u64>,
}

/// The message header (ps-lite `Meta`). Bincode-encoded as frame 0 with every field flat, in
/// the order of ps-lite's `meta.proto` extended: the sections group fields in Rust only.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Meta {
    /// Application command (ps-lite's `head`; `KVWorker` uses 0 unless a `cmd` is given).
    pub head: i32,
    /// Which request of which customer this is, or answers.
    pub tag: RequestTag,
    /// Sender node id.
    pub sender: NodeId,
    /// Receiver node id.
    pub recver: NodeId,
    /// `true` for a request, `false` for its answer.
    pub request: bool,
    /// Push, pull, the values' type and the keys' reference.
    pub kv: KvHeader,
    /// Free text for application commands (no layer below the application reads it).
    pub body: String,
    /// Set on an answer whose request failed: the receiver's error text; on a barrier request
    /// of a node whose application failed, that error.
    pub error: Option<String>,
    /// On an answer with an `error`: the timestamps of further requests of the same customer
    /// that failed with the same error (a server refuses the parked requests of one customer
    /// in one answer). Empty otherwise.
    pub also_refused: Vec<i32>,
    /// Set on control messages.
    pub control: Option<ControlMsg>,
    /// Set on rendezvous traffic, which goes to the customer's rendezvous driver, not to the
    /// application; `head` stays the application's.
    pub rendezvous: Option<Rendezvous>,
    /// Resend number, incarnation and frame lengths, stamped on the way out.
    pub stamp: Stamp,
}

/// Frame 0 carries [`Meta`] flat: every field in this order (bincode names none, so the order
/// is the format; `frame_0_keeps_its_flat_field_order` pins it).
impl Serialize for Meta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut w = s.serialize_struct("Meta", 20)?;
        w.serialize_field("head", &self.head)?;
        w.serialize_field("app_id", &self.tag.app_id)?;
        w.serialize_field("customer_id", &self.tag.customer_id)?;
        w.serialize_field("timestamp", &self.tag.timestamp)?;
        w.serialize_field("sender", &self.sender)?;
        w.serialize_field("recver", &self.recver)?;
        w.serialize_field("request", &self.request)?;
        w.serialize_field("push", &self.kv.push)?;
        w.serialize_field("pull", &self.kv.pull)?;
        w.serialize_field("dtype", &self.kv.dtype)?;
        w.serialize_field("body", &self.body)?;
        w.serialize_field("error", &self.error)?;
        w.serialize_field("control", &self.control)?;
        w.serialize_field("keys", &self.kv.keys)?;
        w.serialize_field("rendezvous", &self.rendezvous)?;
        w.serialize_field("seq", &self.stamp.seq)?;
        w.serialize_field("frame_lens", &self.stamp.frame_lens)?;
        w.serialize_field("incarnation", &self.stamp.incarnation)?;
        w.serialize_field("also_refused", &self.also_refused)?;
        w.serialize_field("placement", &self.kv.placement)?;
        w.end()
    }
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Meta, D::Error> {
        d.deserialize_struct("Meta", &WIRE_FIELDS, FlatMeta)
    }
}

/// The field names of frame 0, in their order (see [`Meta`]'s `Serialize`).
const WIRE_FIELDS: [&str; 20] = [
    "head",
    "app_id",
    "customer_id",
    "timestamp",
    "sender",
    "recver",
    "request",
    "push",
    "pull",
    "dtype",
    "body",
    "error",
    "control",
    "keys",
    "rendezvous",
    "seq",
    "frame_lens",
    "incarnation",
    "also_refused",
    "placement",
];

/// Reads frame 0's flat fields back into [`Meta`]'s sections.
struct FlatMeta;

impl<'de> serde::de::Visitor<'de> for FlatMeta {
    type Value = Meta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the {} fields of a message header", WIRE_FIELDS.len())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Meta, A::Error> {
        let mut at = 0;
        let mut next = || {
            at += 1;
            at - 1
        };
        macro_rules! field {
            () => {{
                let i = next();
                seq.next_element()?
                    .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?
            }};
        }
        let (head, app_id, customer_id, timestamp) = (field!(), field!(), field!(), field!());
        let (sender, recver, request) = (field!(), field!(), field!());
        let (push, pull, dtype) = (field!(), field!(), field!());
        let (body, error, control, keys, rendezvous) =
            (field!(), field!(), field!(), field!(), field!());
        let (seq_no, frame_lens, incarnation, also_refused, placement) =
            (field!(), field!(), field!(), field!(), field!());
        Ok(Meta {
            head,
            tag: RequestTag {
                app_id,
                customer_id,
                timestamp,
            },
            sender,
            recver,
            request,
            kv: KvHeader {
                push,
                pull,
                dtype,
                keys,
                placement,
            },
            body,
            error,
            also_refused,
            control,
            rendezvous,
            stamp: Stamp {
                seq: seq_no,
                incarnation,
                frame_lens,
            },
        })
    }
}

impl Meta {
    /// Whether a server may change its values for this request (a push, or an application
    /// command, `head` ≠ 0). Such requests wait for zero-copy writes from the values, and a
    /// durable server logs them before answering.
    pub fn may_change_state(&self) -> bool {
        self.kv.push || self.head != 0
    }

    /// The header of a control message to `recver` (sender, ids and flags default; the
    /// postoffice fills in the sender).
    pub fn for_control(recver: NodeId, control: ControlMsg) -> Meta {
        Meta {
            recver,
            control: Some(control),
            ..Meta::default()
        }
    }

    /// The control command, if this is a control message.
    pub fn command(&self) -> Option<Command> {
        self.control.as_ref().map(ControlMsg::command)
    }
}
