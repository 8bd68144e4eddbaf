# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Atomic file writes for everything gpufleet writes on a target: temp file in the same directory, fsync,
fchmod, rename. A reader never sees a half-written file, and a failure leaves the old file in place. And the read
of the JSON records gpufleet keeps there (the watch's state and baseline) and of a file's text before it is written.

gpufleet writes as root. A directory another user can write (node_exporter's textfile directory, a 0777 or
sticky directory) would let that user swap the temp file for a symlink between the write and a chmod by name, or
swap a directory on the path for a symlink, and so have root change a file of the attacker's choosing
(``/etc/shadow`` to 0644). So write_atomic walks the path from ``/`` one directory at a time (``O_NOFOLLOW``, each
step relative to the one before; a symlink is followed only where it sits in a directory no other user can write),
refuses a target directory that a user other than root, this process's user and the named ``owner`` can write
(UnsafeDirectory), creates the temp file with ``O_CREAT|O_EXCL|O_NOFOLLOW`` relative to the directory's descriptor,
sets its mode on the descriptor (fchmod), and renames it relative to the same descriptor: no name is resolved
twice."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import errno
import json
import os
import pwd
import stat

MAX_SYMLINKS = 40  # the kernel's own limit on symlinks followed in one path lookup (ELOOP)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class UnsafeDirectory(OSError):
    """A directory on the way to a file gpufleet writes can be written by a user other than root, this process's
    user or the named owner: writing there as root could be redirected. The message names the directory, its owner
    and mode, and the fix."""

    def __str__(self):
        return str(self.strerror)


def read_record(path, version):
    """The JSON object at ``path`` when its ``version`` is ``version``; None when the file is missing, unreadable,
    not JSON, not an object, or of another version (a record gpufleet wrote in another format is not read)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (IOError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == version else None


def read_text(path):
    """The text of the file at ``path``; None when it is missing or cannot be read (what a file gpufleet is about to
    write held before, for a record or a diff)."""
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def owner_uid(owner):
    """The uid of ``owner`` (a user name or a uid); None when it is None or no such user exists here."""
    if owner is None or owner == "":
        return None
    if isinstance(owner, int) or str(owner).isdigit():
        return int(owner)
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        return None


def _user(uid):
    try:
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return "uid %d" % uid


class _Trust:
    """Who may write a directory on the way: root, this process's user and the named owner."""

    def __init__(self, owner, allow_shared):
        self.owner = owner
        self.uids = set([0, os.geteuid()])
        self.owner_gid = None
        uid = owner_uid(owner)
        if uid is not None:
            self.uids.add(uid)
            try:
                self.owner_gid = pwd.getpwuid(uid).pw_gid
            except KeyError:
                pass
        self.gids = set(g for g in (0, os.getegid(), self.owner_gid) if g is not None)
        self.allow_shared = allow_shared

    def others_can_write(self, st):
        """True when a user outside the trusted ones can create, remove or rename entries in this directory."""
        if st.st_uid not in self.uids:
            return True
        if st.st_mode & stat.S_IWOTH:
            return True
        return bool(st.st_mode & stat.S_IWGRP) and st.st_gid not in self.gids

    def may_follow(self, parent_st, entry_st):
        """A symlink (or directory) entry in ``parent`` cannot have been planted or swapped by an untrusted user:
        the parent is not writable by one, or it is sticky (only an entry's owner can replace it) and a trusted user
        owns the entry."""
        if not self.others_can_write(parent_st):
            return True
        return bool(parent_st.st_mode & stat.S_ISVTX) and entry_st.st_uid in self.uids

    def refuse(self, path, directory, st, why):
        named = "" if self.owner is None else " or %s (the owner it was allowed)" % self.owner
        return UnsafeDirectory(
            errno.EPERM,
            "refusing to write %s: the directory %s (owner %s, group gid %d, mode %04o) %s, so a user other than "
            "root, %s%s could redirect this write to another file. Fix: chown root:root %s and chmod go-w %s, or "
            "name its owner where gpufleet allows one (policy watch.textfile_owner for the watch's textfile "
            "directory)" % (path, directory, _user(st.st_uid), st.st_gid, stat.S_IMODE(st.st_mode), why,
                            _user(os.geteuid()), named, directory, directory))


def _check_target(trust, path, directory, st):
    if st.st_uid not in trust.uids:
        raise trust.refuse(path, directory, st, "is owned by another user")
    if st.st_mode & stat.S_IWOTH:
        if st.st_mode & stat.S_ISVTX and trust.allow_shared:
            return
        raise trust.refuse(path, directory, st, "is writable by every user" + (
            " (sticky, like /tmp: a shared directory is refused unless the caller allows one)"
            if st.st_mode & stat.S_ISVTX else ""))
    if st.st_mode & stat.S_IWGRP and st.st_gid not in trust.gids:
        raise trust.refuse(path, directory, st, "is writable by its group")


def _open_directory(path, directory, dir_mode, trust):
    """A descriptor of ``directory`` reached from ``/`` without following a symlink an untrusted user could have
    planted; missing directories are created (``dir_mode``) relative to their parent's descriptor."""
    pending = [c for c in directory.split("/") if c not in ("", ".")]
    fd = os.open("/", DIR_FLAGS)
    where = "/"
    links = 0
    try:
        st = os.fstat(fd)
        while pending:
            name = pending.pop(0)
            try:
                entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
                try:
                    os.mkdir(name, dir_mode, dir_fd=fd)
                except OSError as exc2:
                    if exc2.errno != errno.EEXIST:
                        raise
                entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(entry.st_mode):
                if not trust.may_follow(st, entry):
                    raise trust.refuse(path, where, st, "holds the symlink %s (a user who can write the directory "
                                       "could have planted it)" % name)
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many symlinks on the way to %s" % path)
                target = os.readlink(name, dir_fd=fd)
                pending = [c for c in target.split("/") if c not in ("", ".")] + pending
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", DIR_FLAGS)
                    where = "/"
                    st = os.fstat(fd)
                continue
            if name != ".." and not trust.may_follow(st, entry) and pending:
                raise trust.refuse(path, where, st, "lets another user replace %s on the way" % name)
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            where = os.path.normpath(os.path.join(where, name))
            st = os.fstat(fd)
            if name != ".." and not stat.S_ISDIR(st.st_mode):
                raise OSError(errno.ENOTDIR, "%s is not a directory" % where)
        _check_target(trust, path, where, st)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_atomic(path, text, mode=0o644, dir_mode=0o755, owner=None, allow_shared=False):
    """Write ``text`` (str, or bytes as they are) to ``path``.

    Raises UnsafeDirectory (an OSError) when a directory on the way can be written by a user other than root, this
    process's user or ``owner`` (a user name or uid: the one user allowed to own the target directory, e.g.
    node_exporter's), or when the target directory is world-writable; a sticky one (like /tmp) only with
    ``allow_shared``."""
    path = os.path.abspath(path)
    directory, base = os.path.split(path)
    if not base:
        raise OSError(errno.EISDIR, "%s names a directory, not a file" % path)
    trust = _Trust(owner, allow_shared)
    dfd = _open_directory(path, directory, dir_mode, trust)
    tmp = None
    try:
        tmp = "." + base + "." + binascii.hexlify(os.urandom(6)).decode("ascii")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600,
                     dir_fd=dfd)
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
            mine = os.fstat(f.fileno())
        there = os.stat(tmp, dir_fd=dfd, follow_symlinks=False)
        if (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
            tmp = None  # not ours any more: leave it alone
            raise UnsafeDirectory(errno.EPERM, "refusing to write %s: the temp file was replaced in %s while it was "
                                  "written (another user writes this directory)" % (path, directory))
        os.rename(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        tmp = None
        os.fsync(dfd)
    except BaseException:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
        raise
    finally:
        os.close(dfd)
