#!/usr/bin/env bash
# Builds MXNet's Perl frontend (AI::MXNetCAPI, AI::NNVMCAPI) against libkvstore.so, unchanged.
#   bindings/perl/build.sh <mxnet checkout>/perl-package
# Makefile.PL's hard-coded "-L../../lib -lmxnet" and "-I../../include/..." are overridden on
# the command line with LIBS and INC; the wrappers then record NEEDED libkvstore.so with a
# RUNPATH to it. Debian packages: swig libperl-dev pdl libmouse-perl
# libfunction-parameters-perl libpdl-ccs-perl (Hash::Ordered is not packaged: see README).
set -euo pipefail
source "$(dirname "$0")/../common.sh"
pkg=$(cd "$1" && pwd)
(cd "$pkg/AI-MXNetCAPI" && perl Makefile.PL LIBS="-L$KVSTORE_LIB -lkvstore" INC="-I$MXNET_INCLUDE/mxnet" \
   LDDLFLAGS="$(perl -MConfig -e 'print $Config{lddlflags}') -Wl,-rpath,$KVSTORE_LIB" && make)
(cd "$pkg/AI-NNVMCAPI" && perl Makefile.PL LIBS="-L$KVSTORE_LIB -lkvstore" INC="-I$MXNET_INCLUDE/nnvm" \
   LDDLFLAGS="$(perl -MConfig -e 'print $Config{lddlflags}') -Wl,-rpath,$KVSTORE_LIB" && make)
cat <<MSG
built. Run AI::MXNet's tests with:
  cd $pkg/AI-MXNet && PERL5LIB=$pkg/AI-MXNetCAPI/blib/lib:$pkg/AI-MXNetCAPI/blib/arch:$pkg/AI-NNVMCAPI/blib/lib:$pkg/AI-NNVMCAPI/blib/arch:$pkg/AI-MXNet/lib prove t/test_kvstore.t
MSG
