//! The rendezvous messages, with the fields of TF contrib/verbs' "Message structure" table.

use crate::wire::DType;
use crate::wire::Key;
use serde::{Deserialize, Serialize};

/// A value's meta-data (TF's `RdmaTensorMetaData`: data type, shape, is_dead, bytes).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    /// Element type.
    pub dtype: DType,
    /// Shape: number of elements (values of a key are one-dimensional).
    pub len: u64,
    /// Set when the value does not exist on the sender and never will (no content follows).
    pub is_dead: bool,
    /// Content size in bytes (`len × dtype.size()`).
    pub bytes: u64,
}

impl TensorMeta {
    /// The meta-data of `len` elements of `dtype`.
    pub fn of(dtype: DType, len: u64) -> TensorMeta {
        TensorMeta {
            dtype,
            len,
            is_dead: false,
            bytes: len * dtype.size() as u64,
        }
    }
}

/// A rendezvous control message (TF contrib/verbs `RDMA_MESSAGE_*`). Content travels separately,
/// as a write whose immediate is the request index.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum RvMessage {
    /// `RDMA_MESSAGE_TENSOR_REQUEST` (receiver ⇒ sender): the original request, with the
    /// destination (`remote_addr`/`rkey`, irrelevant when `cached` is `None`) and the meta-data
    /// the requester took from its cache.
    TensorRequest {
        /// The key (TF: tensor name).
        key: Key,
        /// Step id (here: the worker's timestamp).
        step: i64,
        /// Request index, unique among the requester's outstanding requests on this channel.
        request_index: u32,
        /// Destination address.
        remote_addr: u64,
        /// Destination rkey.
        rkey: u32,
        /// The value type the requester expects (TF: `data_type`).
        dtype: DType,
        /// The requester's cached meta-data, `None` the first time.
        cached: Option<TensorMeta>,
    },
    /// `RDMA_MESSAGE_META_DATA_RESPONSE` (sender ⇒ receiver): the up-to-date meta-data, when it
    /// differs from the request's (or in validation mode), with the content's checksum (crc32c)
    /// in validation mode.
    MetaDataResponse {
        /// Request index.
        request_index: u32,
        /// Up-to-date meta-data.
        meta: TensorMeta,
        /// crc32c of the content (data validation mode only).
        checksum: Option<u32>,
    },
    /// `RDMA_MESSAGE_TENSOR_RE_REQUEST` (receiver ⇒ sender): after reallocating, the new
    /// destination.
    TensorReRequest {
        /// The key.
        key: Key,
        /// Step id.
        step: i64,
        /// Request index.
        request_index: u32,
        /// New destination address.
        remote_addr: u64,
        /// New destination rkey.
        rkey: u32,
    },
    /// `RDMA_MESSAGE_ERROR_STATUS` (sender ⇒ receiver): the request failed on the sender.
    ErrorStatus {
        /// The key.
        key: Key,
        /// Step id.
        step: i64,
        /// Request index.
        request_index: u32,
        /// Error code (see [`super::ERR_NOT_SERVED`] and friends).
        code: u32,
        /// Error text.
        message: String,
    },
}

impl RvMessage {
    /// The request index it concerns.
    pub fn request_index(&self) -> u32 {
        match self {
            RvMessage::TensorRequest { request_index, .. }
            | RvMessage::MetaDataResponse { request_index, .. }
            | RvMessage::TensorReRequest { request_index, .. }
            | RvMessage::ErrorStatus { request_index, .. } => *request_index,
        }
    }

    /// Encodes it (bincode 2, standard config).
    pub fn encode(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).unwrap_or_default()
    }

    /// Decodes it, rejecting trailing bytes and anything over 64 KiB.
    ///
    /// # Errors
    /// A text saying what is malformed.
    pub fn decode(b: &[u8]) -> Result<RvMessage, String> {
        let cfg = bincode::config::standard().with_limit::<65536>();
        let (m, used): (RvMessage, usize) = bincode::serde::decode_from_slice(b, cfg)
            .map_err(|e| format!("malformed rendezvous message: {e}"))?;
        if used != b.len() {
            return Err(format!(
                "malformed rendezvous message: {} trailing bytes",
                b.len() - used
            ));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_garbage() {
        let m = RvMessage::TensorRequest {
            key: 7,
            step: 3,
            request_index: 9,
            remote_addr: 0xdead_beef,
            rkey: 42,
            dtype: DType::F32,
            cached: Some(TensorMeta::of(DType::F32, 10)),
        };
        assert_eq!(RvMessage::decode(&m.encode()), Ok(m.clone()));
        let mut b = m.encode();
        b.push(0);
        assert!(RvMessage::decode(&b).unwrap_err().contains("trailing"));
        assert!(RvMessage::decode(&[0xff, 0xff]).is_err());
        assert_eq!(TensorMeta::of(DType::F64, 3).bytes, 24);
    }
}
