//! A group's durability: waits and completions, in each group's submission
//! order; one completion for everything a node queued (an event loop's
//! pass).

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

impl Group {
    /// Blocks until every entry below `offset` (clamped to the group's
    /// end) is durable, leading the round if none is in flight; returns
    /// that offset. At or past the end it waits for every record the
    /// group queued, a queued high watermark included.
    ///
    /// # Errors
    /// `Poisoned` if a sync failed.
    pub fn wait_durable(&self, offset: Offset) -> Result<Offset> {
        self.inner.check_poisoned()?;
        // The appends the log made durable leave the pending queue here
        // (read before the node's lock: the log's lock is never taken
        // under it), so the queue stays as long as one round.
        let flushed = self.inner.log.flushed_offset().0;
        let (point, o) = self.with_flushed(flushed, |g, _| {
            let o = offset.0.min(g.end);
            // At the end: after everything the group queued, a queued
            // high watermark included.
            let point = if offset.0 >= g.end {
                g.pending.back().map(|&(_, s)| s)
            } else {
                g.durable_point(o)
            };
            (point, o)
        })?;
        if let Some(p) = point {
            self.inner.make_durable(p)?;
        }
        Ok(Offset(o))
    }

    /// The completion form of [`Group::wait_durable`]: `completion` is
    /// called once every entry below `offset` is durable (at or past the
    /// group's end: and every record it queued, a queued high watermark
    /// included), on the thread
    /// that finished the sync (keep it short), or at once if they are.
    /// Completions of one group fire in its submission order.
    pub fn on_durable(&self, offset: Offset, completion: OnDurable) {
        if let Some(failure) = self.poisoned() {
            completion(Err(Error::Poisoned(failure)));
            return;
        }
        let flushed = self.inner.log.flushed_offset().0;
        let r = self.with_flushed(flushed, |g, queued| {
            let o = offset.0.min(g.end);
            // At the end: after everything the group queued, a queued
            // high watermark included.
            let point = if offset.0 >= g.end {
                g.pending.back().map(|&(_, s)| s)
            } else {
                g.durable_point(o)
            };
            // A high watermark is queued without starting a round: a
            // completion that waits for it starts one.
            let starts = queued.is_some_and(|end| point.is_some_and(|p| p >= end));
            (point, o, starts)
        });
        match r {
            Err(e) => completion(Err(e)),
            // Through the log even when durable already: it runs after
            // every completion registered before it.
            Ok((p, o, starts)) => {
                self.inner.log.on_durable(
                    Offset(p.unwrap_or(0)),
                    Box::new(move |r| completion(r.map(|_| Offset(o)).map_err(Error::from))),
                );
                if starts {
                    self.inner.log.start_round();
                }
            }
        }
    }

    /// The completion for a pass over many groups of this node (a Ready
    /// loop's): `completion` is called once every record queued on the
    /// node's shared log so far is durable (this group's and every other
    /// group's, queued high watermarks included), after every completion
    /// registered before it, with the group's end as it is now. One
    /// completion then stands for every group the pass wrote to.
    pub fn on_node_durable(&self, completion: OnDurable) {
        if let Some(failure) = self.poisoned() {
            completion(Err(Error::Poisoned(failure)));
            return;
        }
        let end = match self.with(|g| g.end) {
            Ok(end) => Offset(end),
            Err(e) => return completion(Err(e)),
        };
        let log = &self.inner.log;
        let point = log.queued_end();
        log.on_durable(
            point,
            Box::new(move |r| completion(r.map(|_| end).map_err(Error::from))),
        );
        // A high watermark is queued without starting a round.
        if log.flushed_offset() < point {
            log.start_round();
        }
    }
}
