//! Reading saved state (a handler's [`save`](crate::kv::RequestHandler::save) bytes) field by
//! field, with errors that name the field and its offset.

/// A cursor over saved bytes; `name` ("saved store", "saved optimizer") starts every error.
pub struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
    name: &'static str,
}

impl<'b> Reader<'b> {
    /// A cursor at the start of `bytes`.
    pub fn new(name: &'static str, bytes: &'b [u8]) -> Reader<'b> {
        Reader { bytes, at: 0, name }
    }

    /// The next `n` bytes, which hold `what`.
    ///
    /// # Errors
    /// "NAME truncated: WHAT needs N bytes at offset O, R remain".
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'b [u8], String> {
        let start = self.at;
        let end = start
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "{} truncated: {what} needs {n} bytes at offset {start}, {} remain",
                    self.name,
                    self.bytes.len().saturating_sub(start)
                )
            })?;
        self.at = end;
        Ok(&self.bytes[start..end])
    }

    /// A little-endian `u64` holding `what`.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn u64(&mut self, what: &str) -> Result<u64, String> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(b))
    }

    /// A little-endian `i32` holding `what`.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn i32(&mut self, what: &str) -> Result<i32, String> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4, what)?);
        Ok(i32::from_le_bytes(b))
    }

    /// One byte holding `what`.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    /// A `u64` length followed by that many bytes, which hold `what`.
    ///
    /// # Errors
    /// As [`take`](Self::take); a length beyond the platform's `usize`.
    pub fn sized(&mut self, what: &str) -> Result<&'b [u8], String> {
        let n = self.u64(what)?;
        let n = usize::try_from(n).map_err(|_| format!("{}: {what} of {n} bytes", self.name))?;
        self.take(n, what)
    }

    /// A little-endian `f32` holding `what`.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn f32(&mut self, what: &str) -> Result<f32, String> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4, what)?);
        Ok(f32::from_le_bytes(b))
    }

    /// The end of the saved bytes.
    ///
    /// # Errors
    /// "NAME: K bytes left over after WHAT (offset O)".
    pub fn finish(self, what: &str) -> Result<(), String> {
        if self.at == self.bytes.len() {
            return Ok(());
        }
        Err(format!(
            "{}: {} bytes left over after {what} (offset {})",
            self.name,
            self.bytes.len() - self.at,
            self.at
        ))
    }
}
