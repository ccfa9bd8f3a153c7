# RetainGo: builds Go programs (with cgo) from the project's sources with the
# machine's Go toolchain (Debian's golang-go, installed by
# scripts/install-deps.sh for the tests). Without `go` the programs are
# skipped, not an error: RETAIN_HAVE_GO says whether they exist.
#
#   retain_add_go_program(TARGET DIR OUTPUT)
#
# builds the Go module in DIR (a go.mod with no dependencies outside the
# standard library: nothing is downloaded) into OUTPUT, rebuilt when a .go,
# .c, .h or go.mod file of DIR changes. The Go build cache lives in the build
# directory, never in $HOME; GOFLAGS=-buildvcs=false because the sources may
# sit in a git worktree Go cannot read; CGO_ENABLED=1 so the program is
# dynamically linked against libc and takes LD_PRELOAD.

find_program(RETAIN_GO_EXECUTABLE go)
if(RETAIN_GO_EXECUTABLE)
  execute_process(COMMAND ${RETAIN_GO_EXECUTABLE} env GOVERSION
                  OUTPUT_VARIABLE RETAIN_GO_VERSION OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE go_env_status)
  if(NOT go_env_status EQUAL 0)
    set(RETAIN_GO_EXECUTABLE RETAIN_GO_EXECUTABLE-NOTFOUND)
  endif()
endif()
if(RETAIN_GO_EXECUTABLE)
  set(RETAIN_HAVE_GO ON)
  message(STATUS "Go programs: built with ${RETAIN_GO_EXECUTABLE} (${RETAIN_GO_VERSION})")
else()
  set(RETAIN_HAVE_GO OFF)
  message(STATUS "Go programs: go not found (apt-get install golang-go); skipped")
endif()

function(retain_add_go_program target dir output)
  if(NOT RETAIN_HAVE_GO)
    return()
  endif()
  file(GLOB sources CONFIGURE_DEPENDS ${dir}/*.go ${dir}/*.c ${dir}/*.h ${dir}/go.mod)
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -E env
            GOCACHE=${CMAKE_BINARY_DIR}/go-cache GOPATH=${CMAKE_BINARY_DIR}/go-path
            GOFLAGS=-buildvcs=false GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1
            ${RETAIN_GO_EXECUTABLE} build -o ${output} .
    WORKING_DIRECTORY ${dir}
    DEPENDS ${sources}
    COMMENT "Building Go program ${output}"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${output})
endfunction()
