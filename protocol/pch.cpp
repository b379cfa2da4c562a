// SPDX-License-Identifier: Apache-2.0
// Anchor for the shared precompiled header (see the top-level CMakeLists).
