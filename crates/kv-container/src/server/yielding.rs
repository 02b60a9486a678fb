//! Work that reads the whole data file in the background yields to requests: the integrity
//! check runs at a lower CPU priority, an image backup's reads in the idle I/O class, so a
//! claim's commit and its fsync go ahead of them (Linux keeps both per thread; the block
//! layer's schedulers still serve idle reads that waited long).

/// `ioprio_set`/`ioprio_get` (no libc wrapper): the calling thread, the idle class.
#[cfg(target_os = "linux")]
mod sys {
    pub(super) const WHO_PROCESS: libc::c_long = 1;
    pub(super) const CALLING_THREAD: libc::c_long = 0;
    pub(super) const CLASS_IDLE: libc::c_long = 3 << 13;
}

/// Lowers this thread's CPU priority (`nice` 10) for good: for a thread of its own.
pub(crate) fn lower_cpu() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on this thread's own id; a failure only leaves the priority as it was.
        let tid = unsafe { libc::gettid() };
        let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10) };
    }
}

/// This thread's reads in the idle I/O class until dropped (then its class as before): for
/// a thread borrowed from a pool.
pub(crate) struct IdleIo {
    #[cfg(target_os = "linux")]
    before: Option<libc::c_long>,
}

impl IdleIo {
    pub(crate) fn enter() -> IdleIo {
        #[cfg(target_os = "linux")]
        {
            use sys::*;
            // SAFETY: ioprio_get/ioprio_set on the calling thread; a failure changes nothing.
            let before = unsafe { libc::syscall(libc::SYS_ioprio_get, WHO_PROCESS, CALLING_THREAD) };
            let set = unsafe { libc::syscall(libc::SYS_ioprio_set, WHO_PROCESS, CALLING_THREAD, CLASS_IDLE) };
            IdleIo { before: (before >= 0 && set == 0).then_some(before) }
        }
        #[cfg(not(target_os = "linux"))]
        IdleIo {}
    }
}

impl Drop for IdleIo {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(before) = self.before {
            // SAFETY: as in `enter`.
            let _ = unsafe { libc::syscall(libc::SYS_ioprio_set, sys::WHO_PROCESS, sys::CALLING_THREAD, before) };
        }
    }
}
