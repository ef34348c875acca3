//! User and group names of the configuration (`socket_group`, `admin_group`, a class's
//! `match.users` and `match.groups`) looked up in this node's databases.

use crate::agent::setting::SettingError;

pub(super) fn group_id(name: &str) -> Result<u32, SettingError> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(SettingError::NoGroup(name.into())),
        Err(errno) => Err(SettingError::Lookup {
            kind: "group",
            name: name.into(),
            errno,
        }),
    }
}

pub(super) fn user_id(name: &str) -> Result<u32, SettingError> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        Ok(None) => Err(SettingError::NoUser(name.into())),
        Err(errno) => Err(SettingError::Lookup {
            kind: "user",
            name: name.into(),
            errno,
        }),
    }
}
